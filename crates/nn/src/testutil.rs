//! Random graphs and tensors for the kernel tests.

use graphloom_graph::{Csr, NodeId};
use graphloom_tensor::rng::RngKey;
use graphloom_tensor::{DType, Tensor};

/// A random multigraph on `n` nodes with the awkward cases every kernel must handle: isolated
/// nodes (the last two have no edges at all), self-loops, duplicate edges and a hub (node 0
/// receives an edge from every other node but the isolated ones).
pub(crate) fn awkward_graph(n: usize, edges: usize, seed: u64) -> Csr {
    let key = RngKey::new(seed, 0, 0);
    let live = n - 2;
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for e in 0..edges as u64 {
        let u = (key.bits(e, 0) % live as u64) as NodeId;
        let v = (key.bits(e, 1) % live as u64) as NodeId;
        src.push(u);
        dst.push(v);
        if e % 7 == 0 {
            src.push(u);
            dst.push(v); // duplicate
        }
        if e % 5 == 0 {
            src.push(v);
            dst.push(v); // self-loop
        }
    }
    for u in 1..live as NodeId {
        src.push(u);
        dst.push(0);
    }
    Csr::from_edges(n, &src, &dst)
}

/// A uniform random f64 tensor in [-1, 1).
pub(crate) fn rand_tensor(shape: &[usize], seed: u64) -> Tensor {
    let key = RngKey::new(seed, 1, 1);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| key.uniform(i as u64, 0) * 2.0 - 1.0)
        .collect();
    Tensor::from_f64(&v, shape, DType::F64).unwrap()
}

/// Asserts two vectors agree to `tol` relative to the larger magnitude (or 1).
pub(crate) fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let scale = 1f64.max(x.abs()).max(y.abs());
        assert!((x - y).abs() <= tol * scale, "{what}[{i}]: {x} vs {y}");
    }
}
