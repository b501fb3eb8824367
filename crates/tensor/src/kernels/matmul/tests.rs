use super::*;

fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                c[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    c
}

fn transpose(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut t = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = x[i * c + j];
        }
    }
    t
}

#[test]
fn matmul_matches_naive_in_every_dtype_and_transpose() {
    let (m, k, n) = (70, 33, 129);
    let a: Vec<f64> = (0..m * k)
        .map(|i| ((i * 37 % 101) as f64 - 50.0) / 64.0)
        .collect();
    let b: Vec<f64> = (0..k * n)
        .map(|i| ((i * 53 % 97) as f64 - 48.0) / 64.0)
        .collect();
    let want = naive(&a, &b, m, k, n);
    for dtype in [DType::F64, DType::F32, DType::BF16] {
        let tol = match dtype {
            DType::F64 => 1e-12,
            DType::F32 => 1e-4,
            _ => 0.15,
        };
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (av, ashape) = if ta {
                (transpose(&a, m, k), [k, m])
            } else {
                (a.clone(), [m, k])
            };
            let (bv, bshape) = if tb {
                (transpose(&b, k, n), [n, k])
            } else {
                (b.clone(), [k, n])
            };
            let at = Tensor::from_f64(&av, &ashape, dtype).unwrap();
            let bt = Tensor::from_f64(&bv, &bshape, dtype).unwrap();
            let c = matmul(&at, &bt, ta, tb).unwrap();
            assert_eq!(c.shape(), &[m, n]);
            assert_eq!(c.dtype(), dtype);
            for (x, y) in c.to_vec_f64().iter().zip(&want) {
                assert!(
                    (x - y).abs() <= tol * (1.0 + y.abs()),
                    "{dtype} {ta} {tb}: {x} vs {y}"
                );
            }
        }
    }
}

#[test]
fn matmul_add_accumulates_onto_a_copy() {
    for dtype in [DType::F64, DType::F32, DType::BF16] {
        let a = Tensor::from_f64(&[1.0, 2.0, 3.0, 4.0], &[2, 2], dtype).unwrap();
        let acc = Tensor::from_f64(&[0.5, -1.0, 2.0, 0.0], &[2, 2], dtype).unwrap();
        let c = matmul_add(Some(&acc), &a, &a, false, true).unwrap();
        // a * a^T = [[5, 11], [11, 25]]
        assert_eq!(c.to_vec_f64(), vec![5.5, 10.0, 13.0, 25.0], "{dtype}");
        assert_eq!(acc.to_vec_f64(), vec![0.5, -1.0, 2.0, 0.0]);
    }
}

#[test]
fn products_split_by_rows_are_exact_and_do_not_depend_on_threads() {
    // Rows past two tasks' worth, with a short last task; accumulated too, in place.
    let (m, k, n) = (2 * ROWS_PER_TASK + 77, 40, 24);
    let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 211) as f64 / 211.0 - 0.5;
    let a: Vec<f64> = (0..m * k).map(|i| value(i, 1)).collect();
    let b: Vec<f64> = (0..k * n).map(|i| value(i, 2)).collect();
    let c: Vec<f64> = (0..m * n).map(|i| value(i, 3)).collect();
    let mut expected = naive(&a, &b, m, k, n);
    for (e, &ci) in expected.iter_mut().zip(&c) {
        *e += ci;
    }
    let run = |threads: usize, dtype: DType| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let ta = Tensor::from_f64(&a, &[m, k], dtype).unwrap();
            let tb = Tensor::from_f64(&b, &[k, n], dtype).unwrap();
            let tc = Tensor::from_f64(&c, &[m, n], dtype).unwrap();
            let copied = matmul_add(Some(&tc), &ta, &tb, false, false).unwrap();
            let in_place = matmul_add_into(tc, &ta, &tb).unwrap();
            assert_eq!(copied.to_vec_f64(), in_place.to_vec_f64());
            in_place.to_vec_f64()
        })
    };
    for dtype in [DType::F64, DType::F32] {
        let one = run(1, dtype);
        assert_eq!(one, run(3, dtype), "{dtype}");
        let tolerance = if dtype == DType::F64 { 1e-12 } else { 1e-4 };
        for (x, e) in one.iter().zip(&expected) {
            assert!((x - e).abs() < tolerance, "{dtype}: {x} against {e}");
        }
    }
}

#[test]
fn long_reductions_split_in_chunks_are_exact_and_do_not_depend_on_threads() {
    // A transposed left operand over a reduction of five chunks and a short sixth: in one
    // group of chunks on three threads, in three groups on one.
    let (m, n) = (40, 24);
    let k = 5 * reduction_chunk::<f64>(m, 0) + 77;
    assert_eq!(reduction_chunk::<f64>(m, k), reduction_chunk::<f64>(m, 0));
    assert!(splits_reduction::<f64>(m, n, k));
    // A tall output would need partial products of gigabytes: not split.
    assert!(!splits_reduction::<f32>(100_000, 256, 1_000_000));
    let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 211) as f64 / 211.0 - 0.5;
    let a: Vec<f64> = (0..k * m).map(|i| value(i, 1)).collect(); // [k, m]
    let b: Vec<f64> = (0..k * n).map(|i| value(i, 2)).collect(); // [k, n]
    let c: Vec<f64> = (0..m * n).map(|i| value(i, 3)).collect();
    let product = naive(&transpose(&a, k, m), &b, m, k, n);
    let run = |threads: usize, dtype: DType, acc: bool| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let ta = Tensor::from_f64(&a, &[k, m], dtype).unwrap();
            let tb = Tensor::from_f64(&b, &[k, n], dtype).unwrap();
            let tc = Tensor::from_f64(&c, &[m, n], dtype).unwrap();
            let out = matmul_add(acc.then_some(&tc), &ta, &tb, true, false).unwrap();
            out.to_vec_f64()
        })
    };
    for dtype in [DType::F64, DType::F32] {
        for acc in [false, true] {
            let one = run(1, dtype, acc);
            assert_eq!(one, run(3, dtype, acc), "{dtype}, accumulated {acc}");
            let tolerance = if dtype == DType::F64 { 1e-9 } else { 1e-3 };
            for (i, (x, p)) in one.iter().zip(&product).enumerate() {
                let e = p + if acc { c[i] } else { 0.0 };
                assert!((x - e).abs() < tolerance, "{dtype}: {x} against {e}");
            }
        }
    }
}

/// `A^T B` in bf16 over a reduction of several blocks of rows widened at a time: the blocks'
/// products add up to the whole product.
#[test]
fn bf16_weight_gradients_are_summed_over_blocks_of_rows() {
    let (m, n) = (4096, 8);
    let rows = bf16_block_rows(m + n);
    let k = 2 * rows + 37;
    // Eighths in [-1, 1]: exact in bf16, and every product and partial sum exact in f32.
    let value = |i: usize, salt: usize| ((i * 31 + salt * 17) % 17) as f64 / 8.0 - 1.0;
    let a: Vec<f64> = (0..k * m).map(|i| value(i, 1)).collect(); // [k, m]
    let b: Vec<f64> = (0..k * n).map(|i| value(i, 2)).collect(); // [k, n]
    let ta = Tensor::from_f64(&a, &[k, m], DType::BF16).unwrap();
    let tb = Tensor::from_f64(&b, &[k, n], DType::BF16).unwrap();
    let out = matmul(&ta, &tb, true, false).unwrap().to_vec_f64();
    let expected = naive(&transpose(&a, k, m), &b, m, k, n);
    for (x, e) in out.iter().zip(&expected) {
        // The one rounding left: the sum's to bf16 (8 bits of mantissa).
        assert!((x - e).abs() <= e.abs() / 128.0, "{x} against {e}");
    }
}

#[test]
fn matmul_rejects_bad_shapes() {
    let a = Tensor::zeros(&[3, 4], DType::F32);
    let b = Tensor::zeros(&[5, 2], DType::F32);
    assert!(matmul(&a, &b, false, false).is_err());
    assert!(matmul(&a, &Tensor::zeros(&[4, 2], DType::F64), false, false).is_err());
}
