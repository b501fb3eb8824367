//! Trainable embeddings: the sparse optimizers against an f64 reference that is itself lazy;
//! the same table after training on 1, 2 and 4 ranks (local and MPI) with duplicate ids that
//! cross ranks; save and load with optimizer state, bit-exact; the cache of remote rows.

use std::collections::BTreeMap;
use std::sync::Arc;

use graphloom_comm::{Communicator, Local};
use graphloom_store::{
    Admission, CacheConfig, Embedding, Layout, Location, SparseOptimizer, StoreError, StoreSpec,
    StoreTensor,
};
use graphloom_tensor::{DType, Tensor};

type Comm = Arc<dyn Communicator>;

fn table(comm: &Comm, rows: usize, dim: usize, layout: Layout) -> Result<StoreTensor, StoreError> {
    StoreTensor::new(
        comm.clone(),
        StoreSpec::new(&[rows, dim], DType::F32, layout, Location::Host),
    )
}

/// A global batch of ids with many repeats, for step `step`.
fn batch(rows: usize, len: usize, step: usize) -> Vec<i64> {
    (0..len)
        .map(|i| ((i * i * 7 + step * 13 + i * 3) % (rows / 2 + 1) * 2 % rows) as i64)
        .collect()
}

/// The gradient of position `pos` of the global batch at `step`: a fixed pattern.
fn grad_value(step: usize, pos: usize, col: usize) -> f64 {
    (((step * 31 + pos * 17 + col * 5) % 23) as f64 - 11.0) / 7.0
}

/// This rank's contiguous slice of a global batch.
fn my_slice(comm: &Comm, len: usize) -> std::ops::Range<usize> {
    let (r, n) = (comm.rank(), comm.size());
    len * r / n..len * (r + 1) / n
}

/// Runs `steps` optimizer steps on a table initialised by `init_uniform`, returns the whole
/// table (gathered) on every rank.
fn train(
    comm: &Comm,
    optimizer: SparseOptimizer,
    layout: Layout,
    rows: usize,
    dim: usize,
    steps: std::ops::Range<usize>,
    grad_dtype: DType,
    start_from: Option<&std::path::Path>,
) -> Result<(Embedding, Vec<f32>), StoreError> {
    let mut emb = match start_from {
        Some(prefix) => Embedding::load(
            comm.clone(),
            prefix,
            2,
            dim,
            layout,
            Location::Host,
            Some(optimizer),
        )?,
        None => {
            let mut e = Embedding::trainable(table(comm, rows, dim, layout)?, optimizer)?;
            e.init_uniform(5, 0.5)?;
            e
        }
    };
    for step in steps {
        let global = batch(rows, 40, step);
        let mine = my_slice(comm, global.len());
        let ids = &global[mine.clone()];
        let values: Vec<f64> = mine
            .clone()
            .flat_map(|pos| (0..dim).map(move |c| grad_value(step, pos, c)))
            .collect();
        let grads = Tensor::from_f64(&values, &[ids.len(), dim], grad_dtype)?;
        emb.apply_gradients(ids, &grads, 0.05)?;
    }
    let all: Vec<i64> = (0..rows as i64).collect();
    let whole = emb.gather(&all)?.as_slice::<f32>()?.to_vec();
    Ok((emb, whole))
}

/// The lazy f64 reference: only touched rows change; per-row step counts.
fn reference(
    optimizer: SparseOptimizer,
    init: &[f32],
    rows: usize,
    dim: usize,
    steps: usize,
    bf16_grads: bool,
) -> Vec<f64> {
    let mut w: Vec<f64> = init.iter().map(|&x| x as f64).collect();
    let mut s0 = vec![0f64; rows * dim];
    let mut s1 = vec![0f64; rows * dim];
    let mut count = vec![0i32; rows];
    let lr = 0.05f64;
    for step in 0..steps {
        let global = batch(rows, 40, step);
        let mut sums: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
        for (pos, &id) in global.iter().enumerate() {
            let sum = sums.entry(id).or_insert_with(|| vec![0.0; dim]);
            for c in 0..dim {
                let g = grad_value(step, pos, c);
                sum[c] += if bf16_grads {
                    half::bf16::from_f64(g).to_f64()
                } else {
                    g
                };
            }
        }
        for (id, g) in sums {
            let r = id as usize;
            count[r] += 1;
            let t = count[r];
            for c in 0..dim {
                let i = r * dim + c;
                match optimizer {
                    SparseOptimizer::Sgd { weight_decay } => {
                        w[i] -= lr * (g[c] + weight_decay as f64 * w[i]);
                    }
                    SparseOptimizer::LazyAdam {
                        beta1,
                        beta2,
                        epsilon,
                        weight_decay,
                        decoupled,
                    } => {
                        let (b1, b2, wd) = (beta1 as f64, beta2 as f64, weight_decay as f64);
                        let mut grad = g[c];
                        if decoupled {
                            w[i] -= lr * wd * w[i];
                        } else {
                            grad += wd * w[i];
                        }
                        s0[i] = b1 * s0[i] + (1.0 - b1) * grad;
                        s1[i] = b2 * s1[i] + (1.0 - b2) * grad * grad;
                        let m = s0[i] / (1.0 - b1.powi(t));
                        let v = s1[i] / (1.0 - b2.powi(t));
                        w[i] -= lr * m / (v.sqrt() + epsilon as f64);
                    }
                    SparseOptimizer::AdaGrad {
                        epsilon,
                        weight_decay,
                    } => {
                        let grad = g[c] + weight_decay as f64 * w[i];
                        s0[i] += grad * grad;
                        w[i] -= lr * grad / (s0[i].sqrt() + epsilon as f64);
                    }
                    SparseOptimizer::RmsProp {
                        alpha,
                        epsilon,
                        weight_decay,
                    } => {
                        let a = alpha as f64;
                        let grad = g[c] + weight_decay as f64 * w[i];
                        s0[i] = a * s0[i] + (1.0 - a) * grad * grad;
                        w[i] -= lr * grad / (s0[i].sqrt() + epsilon as f64);
                    }
                }
            }
        }
    }
    w
}

fn optimizers() -> Vec<SparseOptimizer> {
    vec![
        SparseOptimizer::sgd().with_weight_decay(0.01),
        SparseOptimizer::lazy_adam(),
        SparseOptimizer::lazy_adam().with_weight_decay(0.01),
        SparseOptimizer::LazyAdam {
            beta1: 0.8,
            beta2: 0.99,
            epsilon: 1e-6,
            weight_decay: 0.02,
            decoupled: true,
        },
        SparseOptimizer::adagrad().with_weight_decay(0.01),
        SparseOptimizer::rmsprop().with_weight_decay(0.01),
    ]
}

#[test]
fn optimizers_match_a_lazy_f64_reference() {
    let (rows, dim, steps) = (37, 5, 6);
    for optimizer in optimizers() {
        for grad_dtype in [DType::F32, DType::BF16] {
            for r in Local::run(2, |comm| {
                let (_, init) = train(
                    &comm,
                    optimizer,
                    Layout::Distributed,
                    rows,
                    dim,
                    0..0,
                    grad_dtype,
                    None,
                )?;
                let (_, got) = train(
                    &comm,
                    optimizer,
                    Layout::Distributed,
                    rows,
                    dim,
                    0..steps,
                    grad_dtype,
                    None,
                )?;
                let want = reference(
                    optimizer,
                    &init,
                    rows,
                    dim,
                    steps,
                    grad_dtype == DType::BF16,
                );
                let touched: std::collections::HashSet<i64> =
                    (0..steps).flat_map(|s| batch(rows, 40, s)).collect();
                for row in 0..rows {
                    for c in 0..dim {
                        let i = row * dim + c;
                        if !touched.contains(&(row as i64)) {
                            assert_eq!(
                                got[i], init[i],
                                "{optimizer:?}: untouched row {row} changed"
                            );
                            continue;
                        }
                        let err = (got[i] as f64 - want[i]).abs();
                        assert!(
                            err <= 2e-5 * (1.0 + want[i].abs()),
                            "{optimizer:?} {grad_dtype}: row {row} col {c}: {} vs {}",
                            got[i],
                            want[i]
                        );
                    }
                }
                assert!(touched.len() < rows, "the test needs untouched rows");
                Ok::<(), StoreError>(())
            }) {
                r.unwrap();
            }
        }
    }
}

/// LazyAdam on the toy task, trained on this communicator and on a single in-process rank:
/// the tables must agree to 1e-6 relative (they are in fact bit-identical).
fn same_table_as_one_rank(comm: &Comm) -> Result<(), StoreError> {
    let (rows, dim) = (101, 13);
    let optimizer = SparseOptimizer::lazy_adam().with_weight_decay(0.001);
    for layout in [Layout::Distributed, Layout::Chunked] {
        if layout == Layout::Chunked && comm.backend() == "mpi" && comm.size() > 1 {
            continue; // host memory is private to each process
        }
        let (_, got) = train(comm, optimizer, layout, rows, dim, 0..8, DType::F32, None)?;
        let one = Local::run(1, |c| {
            train(
                &c,
                optimizer,
                Layout::Distributed,
                rows,
                dim,
                0..8,
                DType::F32,
                None,
            )
            .map(|r| r.1)
        });
        let want = one.into_iter().next().unwrap()?;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1e-6),
                "{layout}: element {i}: {g} vs {w}"
            );
        }
        // Gradients are summed in one canonical order on any number of ranks: same bits.
        assert_eq!(got, want, "{layout}: not bit-identical to one rank");
    }
    Ok(())
}

#[test]
fn local_training_gives_the_same_table_on_1_2_and_4_ranks() {
    for size in [1, 2, 4] {
        for r in Local::run(size, |comm| same_table_as_one_rank(&comm)) {
            r.unwrap();
        }
    }
}

#[test]
fn save_and_load_with_optimizer_state_is_bit_exact() {
    let dir = std::env::temp_dir().join(format!("graphloom-emb-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("emb");
    let (rows, dim) = (53, 7);
    for optimizer in optimizers() {
        let straight = Local::run(1, |c| {
            train(
                &c,
                optimizer,
                Layout::Distributed,
                rows,
                dim,
                0..5,
                DType::F32,
                None,
            )
            .map(|r| r.1)
        });
        let straight = straight.into_iter().next().unwrap().unwrap();
        for r in Local::run(2, |comm| {
            let (emb, _) = train(
                &comm,
                optimizer,
                Layout::Distributed,
                rows,
                dim,
                0..3,
                DType::F32,
                None,
            )?;
            emb.save(&prefix)
        }) {
            r.unwrap();
        }
        for size in [1, 3] {
            for r in Local::run(size, |comm| {
                let (_, resumed) = train(
                    &comm,
                    optimizer,
                    Layout::Distributed,
                    rows,
                    dim,
                    3..5,
                    DType::F32,
                    Some(&prefix),
                )?;
                assert_eq!(resumed, straight, "{optimizer:?} resumed on {size} ranks");
                Ok::<(), StoreError>(())
            }) {
                r.unwrap();
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_normal_initialisation_is_standard_normal_and_the_same_on_any_rank_count() {
    let (rows, dim) = (2000, 8);
    let whole = |size: usize| -> Vec<f32> {
        let mut out = Local::run(size, |comm| {
            let mut e = Embedding::trainable(
                table(&comm, rows, dim, Layout::Distributed)?,
                SparseOptimizer::lazy_adam(),
            )?;
            e.init_normal(3, 2.0)?;
            let all: Vec<i64> = (0..rows as i64).collect();
            Ok::<_, StoreError>(e.gather(&all)?.as_slice::<f32>()?.to_vec())
        });
        out.remove(0).unwrap()
    };
    let one = whole(1);
    assert_eq!(one, whole(3), "the table depends on the rank count");
    // 16,000 draws of N(0, 4): the mean within 4.5 standard errors of 0, the variance within
    // 4.5 of its standard errors (sqrt(2 / n) * 4) of 4, the share beyond 2 std of 4.55%.
    let n = one.len() as f64;
    let mean = one.iter().map(|&x| x as f64).sum::<f64>() / n;
    let var = one.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
    assert!(mean.abs() < 4.5 * 2.0 / n.sqrt(), "mean {mean}");
    assert!(
        (var - 4.0).abs() < 4.5 * 4.0 * (2.0 / n).sqrt(),
        "variance {var}"
    );
    let tails = one.iter().filter(|&&x| x.abs() > 4.0).count() as f64 / n;
    assert!((tails - 0.0455).abs() < 0.008, "share beyond 2 std {tails}");
}

#[test]
fn bad_gradients_are_refused_on_every_rank() {
    for r in Local::run(2, |comm| {
        let mut emb = Embedding::trainable(
            table(&comm, 10, 3, Layout::Distributed)?,
            SparseOptimizer::sgd(),
        )?;
        let ids = if comm.rank() == 1 { vec![10] } else { vec![0] };
        let grads = Tensor::zeros(&[1, 3], DType::F32);
        let err = emb.apply_gradients(&ids, &grads, 0.1).unwrap_err();
        if comm.rank() == 1 {
            assert!(
                matches!(
                    err,
                    StoreError::OutOfRange {
                        id: 10,
                        rows: 10,
                        ..
                    }
                ),
                "{err}"
            );
        } else {
            assert!(
                matches!(
                    err,
                    StoreError::Comm(graphloom_comm::CommError::PeerFailed { rank: 1, .. })
                ),
                "{err}"
            );
        }
        let err = emb
            .apply_gradients(&[0], &Tensor::zeros(&[1, 4], DType::F32), 0.1)
            .unwrap_err();
        assert!(err.to_string().contains("[1, 4]"), "{err}");
        let frozen = Embedding::frozen(table(&comm, 10, 3, Layout::Distributed)?);
        let cache = CacheConfig {
            ratio: 1.0 / 1024.0,
            admission: Admission::Frequency { refresh_every: 4 },
        };
        assert!(frozen
            .with_cache(cache)
            .unwrap_err()
            .to_string()
            .contains("outside [1/512, 1]"));
        let cache = CacheConfig {
            ratio: 0.5,
            admission: Admission::Frequency { refresh_every: 4 },
        };
        assert!(emb
            .with_cache(cache.clone())
            .unwrap_err()
            .to_string()
            .contains("frozen rows only"));
        let chunked = Embedding::frozen(table(&comm, 10, 3, Layout::Chunked)?);
        assert!(chunked
            .with_cache(cache)
            .unwrap_err()
            .to_string()
            .contains("distributed layout"));
        Ok::<(), StoreError>(())
    }) {
        r.unwrap();
    }
}

#[test]
fn the_cache_returns_the_same_rows_and_hits_hot_ones() {
    let (rows, dim) = (4000, 6);
    for admission in [
        Admission::Frequency { refresh_every: 4 },
        Admission::Scores(Arc::new(
            (0..rows).map(|i| 1.0 / (1.0 + i as f32)).collect(),
        )),
    ] {
        for r in Local::run(2, |comm| {
            let mut plain = Embedding::frozen(table(&comm, rows, dim, Layout::Distributed)?);
            plain.init_uniform(9, 1.0)?;
            let mut cached = Embedding::frozen(table(&comm, rows, dim, Layout::Distributed)?);
            cached.init_uniform(9, 1.0)?;
            let mut cached = cached.with_cache(CacheConfig {
                ratio: 0.05,
                admission: admission.clone(),
            })?;
            for step in 0..40u64 {
                // A power-law stream: low ids are hot, on both ranks' halves. Halfway the hot
                // rows move, so a frequency cache evicts rows and refills their slots.
                let shift = if step < 20 { 0 } else { 1000 };
                let ids: Vec<i64> = (0..500u64)
                    .map(|i| {
                        let u = ((i * 7919 + step * 104_729 + comm.rank() as u64 * 31) % 1000)
                            as f64
                            / 1000.0;
                        let id = ((rows as f64).powf(u) - 1.0) as i64;
                        (id * 2 + shift + (i % 2) as i64 * (rows as i64 / 2)) % rows as i64
                    })
                    .collect();
                assert_eq!(
                    cached.gather(&ids)?.as_bytes(),
                    plain.gather(&ids)?.as_bytes()
                );
                let stats = cached.cache_stats().unwrap();
                assert!(stats.rows <= stats.capacity, "{stats:?}");
            }
            let stats = cached.cache_stats().unwrap();
            assert_eq!(stats.capacity, 100);
            // The misses (and a frequency cache's refreshes) are fetched by gathers of the
            // table, which its counters see.
            let fetched = cached.table().stats().rows;
            assert!(
                fetched >= stats.misses,
                "{fetched} rows fetched for {stats:?}"
            );
            if let Admission::Frequency { .. } = admission {
                assert_eq!(stats.rows, 100, "the slots of rows that left stay filled");
            }
            assert!(
                stats.hit_rate() > 0.2,
                "{admission:?}: hit rate {}",
                stats.hit_rate()
            );
            Ok::<(), StoreError>(())
        }) {
            r.unwrap();
        }
    }
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use graphloom_comm::launch::expect_test_under_mpirun;

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_same_table_as_one_rank() {
        graphloom_comm::mpi::run_rank(|comm| same_table_as_one_rank(&comm)).unwrap();
    }

    #[test]
    fn mpi_training_gives_the_same_table_on_2_and_4_processes() {
        for np in [2, 4] {
            expect_test_under_mpirun(np, "mpi::rank_same_table_as_one_rank");
        }
    }
}
