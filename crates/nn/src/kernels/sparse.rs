//! The sparse first layer: bag-of-words features (Cora's are 1.3% non-zero) times a dense
//! weight, with the input dropout applied to the non-zeros only, which is the same as dropping
//! out the dense matrix (a zero stays zero) at a fraction of the work.

use std::sync::Arc;

use graphloom_tensor::autodiff::ops::Dropout;
use graphloom_tensor::{with_float, BackwardCtx, Float, Op, Real, Tape, Tensor, Var};

use crate::Result;

/// Features stored by rows and by columns: the product runs over rows, the weight gradient
/// over columns, so neither needs atomics.
pub struct SparseFeatures {
    rows: usize,
    cols: usize,
    row_ptr: Vec<usize>,
    row_col: Vec<u32>,
    row_val: Vec<f64>,
    col_ptr: Vec<usize>,
    col_row: Vec<u32>,
    col_val: Vec<f64>,
}

impl SparseFeatures {
    /// The non-zeros of a dense `[rows, cols]` float tensor, or `None` when more than
    /// `max_density` of its entries are non-zero (then the dense product is faster).
    pub fn from_dense(x: &Tensor, max_density: f64) -> Option<SparseFeatures> {
        let (rows, cols) = x.dims2();
        // Read in the tensor's own dtype: a copy of the matrix widened to f64 would hold twice
        // (f32) or four times (bf16) the features' memory while a dense input is checked.
        let sparse: graphloom_tensor::Result<Option<SparseFeatures>> = with_float!(x.dtype(), "sparse features", T => {
            x.as_slice::<T>().map(|v| {
                SparseFeatures::from_values(rows, cols, max_density, |i| v[i].to_acc().to_f64())
            })
        });
        sparse.ok().flatten()
    }

    /// [`SparseFeatures::from_dense`] of the `rows x cols` values `value(i)` in row order.
    fn from_values(
        rows: usize,
        cols: usize,
        max_density: f64,
        value: impl Fn(usize) -> f64,
    ) -> Option<SparseFeatures> {
        let len = rows * cols;
        let nnz = (0..len).filter(|&i| value(i) != 0.0).count();
        if len == 0
            || nnz as f64 > max_density * len as f64
            || cols > u32::MAX as usize
            || rows > u32::MAX as usize
        {
            return None;
        }
        let (mut row_ptr, mut row_col, mut row_val) =
            (vec![0], Vec::with_capacity(nnz), Vec::with_capacity(nnz));
        let mut col_count = vec![0usize; cols + 1];
        for r in 0..rows {
            for c in 0..cols {
                let a = value(r * cols + c);
                if a != 0.0 {
                    row_col.push(c as u32);
                    row_val.push(a);
                    col_count[c + 1] += 1;
                }
            }
            row_ptr.push(row_col.len());
        }
        for c in 0..cols {
            col_count[c + 1] += col_count[c];
        }
        let col_ptr = col_count.clone();
        let (mut col_row, mut col_val) = (vec![0u32; nnz], vec![0f64; nnz]);
        for r in 0..rows {
            for i in row_ptr[r]..row_ptr[r + 1] {
                let slot = &mut col_count[row_col[i] as usize];
                col_row[*slot] = r as u32;
                col_val[*slot] = row_val[i];
                *slot += 1;
            }
        }
        Some(SparseFeatures {
            rows,
            cols,
            row_ptr,
            row_col,
            row_val,
            col_ptr,
            col_row,
            col_val,
        })
    }

    /// The number of non-zeros.
    pub fn nnz(&self) -> usize {
        self.row_val.len()
    }

    /// `dropout(X) * w` for `w: [cols, out]`; see the module doc.
    pub fn matmul(
        self: &Arc<Self>,
        tape: &mut Tape,
        w: &Var,
        dropout: Option<Dropout>,
    ) -> Result<Var> {
        Ok(tape.apply(
            SparseMatmul {
                x: self.clone(),
                dropout,
            },
            &[w],
        )?)
    }
}

struct SparseMatmul {
    x: Arc<SparseFeatures>,
    dropout: Option<Dropout>,
}

impl SparseMatmul {
    #[inline(always)]
    fn factor(&self, row: usize, col: usize) -> f64 {
        self.dropout
            .map_or(1.0, |d| d.factor(row as u64, col as u64))
    }
}

impl Op for SparseMatmul {
    fn name(&self) -> &'static str {
        "sparse_matmul"
    }
    fn forward(&mut self, inputs: &[&Tensor]) -> graphloom_tensor::Result<Tensor> {
        let (w, x) = (inputs[0], &*self.x);
        let (k, out) = w.dims2();
        if k != x.cols {
            return Err(graphloom_tensor::Error::ShapeMismatch {
                op: "sparse_matmul",
                lhs: vec![x.rows, x.cols],
                rhs: w.shape().to_vec(),
            });
        }
        with_float!(w.dtype(), "sparse_matmul", T => {
            let ws = w.as_slice::<T>()?;
            let mut res = graphloom_tensor::alloc::zeros::<T>(x.rows * out);
            graphloom_tensor::kernels::elementwise::for_each_row_mut(&mut res, out, #[inline(always)] |r, row| {
                let mut acc = vec![<<T as Float>::Acc as Real>::ZERO; out];
                for i in x.row_ptr[r]..x.row_ptr[r + 1] {
                    let j = x.row_col[i] as usize;
                    let a = <<T as Float>::Acc as Real>::from_f64(x.row_val[i] * self.factor(r, j));
                    for (s, &wv) in acc.iter_mut().zip(&ws[j * out..(j + 1) * out]) {
                        *s += a * wv.to_acc();
                    }
                }
                for (o, s) in row.iter_mut().zip(acc) {
                    *o = T::from_acc(s);
                }
            });
            Tensor::from_vec(res, &[x.rows, out])
        })
    }
    fn backward(&self, ctx: &BackwardCtx<'_>) -> graphloom_tensor::Result<Vec<Option<Tensor>>> {
        let (w, g, x) = (ctx.inputs[0], ctx.grad, &*self.x);
        let (_, out) = w.dims2();
        with_float!(w.dtype(), "sparse_matmul", T => {
            let gs = g.as_slice::<T>()?;
            let mut dw = graphloom_tensor::alloc::zeros::<T>(x.cols * out);
            graphloom_tensor::kernels::elementwise::for_each_row_mut(&mut dw, out, #[inline(always)] |j, row| {
                let mut acc = vec![<<T as Float>::Acc as Real>::ZERO; out];
                for i in x.col_ptr[j]..x.col_ptr[j + 1] {
                    let r = x.col_row[i] as usize;
                    let a = <<T as Float>::Acc as Real>::from_f64(x.col_val[i] * self.factor(r, j));
                    for (s, &gv) in acc.iter_mut().zip(&gs[r * out..(r + 1) * out]) {
                        *s += a * gv.to_acc();
                    }
                }
                for (o, s) in row.iter_mut().zip(acc) {
                    *o = T::from_acc(s);
                }
            });
            Ok(vec![Some(Tensor::from_vec(dw, w.shape())?)])
        })
    }
    fn reads_output(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_close, rand_tensor};
    use graphloom_tensor::autodiff::gradcheck::max_gradient_error;
    use graphloom_tensor::autodiff::ops;
    use graphloom_tensor::rng::RngKey;
    use graphloom_tensor::DType;

    #[test]
    fn sparse_product_with_dropout_equals_the_dense_one() {
        // 30 x 40 with about 10% non-zeros, some rows and columns empty.
        let key = RngKey::new(3, 0, 0);
        let v: Vec<f64> = (0..1200)
            .map(|i| {
                if key.uniform(i, 0) < 0.1 && i % 40 != 7 {
                    key.uniform(i, 1)
                } else {
                    0.0
                }
            })
            .collect();
        let x = Tensor::from_f64(&v, &[30, 40], DType::F64).unwrap();
        let sp = Arc::new(SparseFeatures::from_dense(&x, 0.2).unwrap());
        assert!(SparseFeatures::from_dense(&x, 0.01).is_none());
        let rule = Dropout {
            p: 0.4,
            key: RngKey::new(1, 2, 0),
        };
        let drop = Some(rule);
        let w = rand_tensor(&[40, 5], 9);
        let mut t = Tape::no_grad();
        let sparse = sp
            .matmul(&mut t, &Var::constant(w.clone()), drop)
            .unwrap()
            .value()
            .to_vec_f64();
        let xd = ops::dropout(&mut t, &Var::constant(x.clone()), rule, None).unwrap();
        let dense = ops::matmul(&mut t, &xd, &Var::constant(w.clone()))
            .unwrap()
            .value()
            .to_vec_f64();
        assert_close(&sparse, &dense, 1e-12, "sparse product");
        let f = move |t: &mut Tape, v: &[Var]| {
            sp.matmul(t, &v[0], drop)
                .map_err(crate::kernels::aggregate::to_tensor_error)
        };
        assert!(max_gradient_error(&f, &[w], &[true], 1e-6).unwrap() < 1e-8);
    }
}
