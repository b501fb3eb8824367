//! Dense matrix multiplication, the one place that calls the `gemm` crate.
//!
//! `bf16` has no CPU gemm kernel: its operands are widened to `f32` in blocks of rows, multiplied
//! in `f32` and rounded once, so the transient `f32` copy stays a block, not a whole matrix.

use half::bf16;

use crate::{DType, Element, Error, Real, Result, Tensor};

/// Bytes of `f32` a `bf16` product works in at a time: the block of rows of its operands
/// widened to `f32` and of its output before narrowing. A block is scratch no tensor counts.
const BF16_BLOCK_BYTES: usize = 4 << 20;

/// Rows of a block of [`BF16_BLOCK_BYTES`] whose rows hold `width` values.
fn bf16_block_rows(width: usize) -> usize {
    (BF16_BLOCK_BYTES / (4 * width).max(1)).max(ROWS_PER_TASK)
}

/// A matrix operand: a row-major `[rows, cols]` slice, read transposed when `transposed`.
#[derive(Clone, Copy)]
struct Operand<'a, T> {
    data: &'a [T],
    rows: usize,
    cols: usize,
    transposed: bool,
}

impl<T> Operand<'_, T> {
    /// Logical (rows, cols) after the optional transpose.
    fn dims(&self) -> (usize, usize) {
        if self.transposed {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        }
    }
    /// (column stride, row stride) of the logical matrix.
    fn strides(&self) -> (isize, isize) {
        if self.transposed {
            (self.cols as isize, 1)
        } else {
            (1, self.cols as isize)
        }
    }
}

/// Products smaller than this (m * n * k) run on one thread.
const PARALLEL_MIN_WORK: usize = 64 * 64 * 64;

fn parallelism(m: usize, n: usize, k: usize) -> gemm::Parallelism {
    if m * n * k < PARALLEL_MIN_WORK {
        gemm::Parallelism::None
    } else {
        gemm::Parallelism::Rayon(rayon::current_num_threads())
    }
}

/// Output rows per task of a product split by rows (see [`gemm_into`]).
const ROWS_PER_TASK: usize = 256;

/// A pointer that parallel tasks may share, each writing its own rows of it.
#[derive(Clone, Copy)]
struct RowsPtr<T>(*mut T);
// SAFETY: the tasks that share it write disjoint rows.
unsafe impl<T> Send for RowsPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for RowsPtr<T> {}

impl<T> RowsPtr<T> {
    /// The pointer. A closure that calls this captures the whole `RowsPtr` (which is `Send`),
    /// where one that read the field would capture the bare pointer (which is not).
    fn get(&self) -> *mut T {
        self.0
    }
}

/// `dst = lhs * rhs`, or `dst += lhs * rhs` when `accumulate`, for f32 or f64, `dst`
/// row-major `[m, n]`.
///
/// A large product whose left operand is read by rows is cut into tasks of [`ROWS_PER_TASK`]
/// output rows, each a product of its own on one thread, that rayon shares out as threads come
/// free. The gemm crate's own threading gives each thread one equal share: a thread slowed down
/// (by the batch producer beside the compute, or by another process on a shared host) then
/// holds up the whole product while the other cores wait. The cut depends only on the shapes,
/// and each output element is the same sum over `k` either way, so the result does not depend
/// on the thread count.
///
/// # Safety
/// `dst` must point to `m * n` writable elements that do not alias the operands, initialised
/// when `accumulate` (otherwise they are only written).
unsafe fn gemm_into<T: Real>(
    dst: *mut T,
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
    accumulate: bool,
) {
    let (m, k) = lhs.dims();
    let n = rhs.dims().1;
    if lhs.transposed && !rhs.transposed && splits_reduction::<T>(m, n, k) {
        // SAFETY: the caller's promise.
        unsafe { gemm_split_reduction(dst, lhs, rhs, accumulate) };
        return;
    }
    if lhs.transposed || m < 2 * ROWS_PER_TASK || m * n * k < PARALLEL_MIN_WORK {
        // SAFETY: the caller's promise.
        unsafe { gemm_one(dst, lhs, rhs, accumulate, parallelism(m, n, k)) };
        return;
    }
    use rayon::prelude::*;
    let out = RowsPtr(dst);
    (0..m.div_ceil(ROWS_PER_TASK))
        .into_par_iter()
        .for_each(|task| {
            let (first, last) = (task * ROWS_PER_TASK, ((task + 1) * ROWS_PER_TASK).min(m));
            let rows = Operand {
                data: &lhs.data[first * lhs.cols..last * lhs.cols],
                rows: last - first,
                cols: lhs.cols,
                transposed: false,
            };
            // SAFETY: rows first..last of `dst` (n wide) are this task's alone, inside the
            // m * n elements the caller promised; `rows` is the left operand's same rows.
            unsafe {
                gemm_one(
                    out.get().add(first * n),
                    rows,
                    rhs,
                    accumulate,
                    gemm::Parallelism::None,
                )
            };
        });
}

/// Bytes of the left operand a task of a split reduction reads: with the right operand's rows
/// beside them they stay in a core's L2 cache. Tasks of 2048 rows of a 128-wide operand (1 MiB)
/// ran at 153 GFLOP/s on two cores, tasks of 4096 rows at 93.
const REDUCTION_CHUNK_BYTES: usize = 1 << 20;
/// The most chunks a split reduction is cut into (a long reduction gets longer chunks).
const MAX_REDUCTION_CHUNKS: usize = 64;

/// The most bytes the partial products of all of a split reduction's chunks would take: beyond
/// it (a tall output, whose rows the gemm crate already shares out well) the product is not
/// split. Only a group of them is held at a time ([`gemm_split_reduction`]).
const MAX_PARTIAL_BYTES: usize = 64 << 20;
/// The most bytes the partial products held at once may take beyond one per thread
/// ([`gemm_split_reduction`] takes its chunks a group at a time): two chunks a thread of a
/// 1000 x 1024 output held 33 MiB that no tensor counted.
const MAX_GROUP_BYTES: usize = 4 << 20;

/// Whether `lhs^T * rhs` (`[m, n]`, a reduction over `k`) is cut by [`gemm_split_reduction`]:
/// when the reduction is at least two chunks and their partial products stay small. A function
/// of the shapes alone, so the sums do not depend on the thread count.
fn splits_reduction<T>(m: usize, n: usize, k: usize) -> bool {
    let chunk = reduction_chunk::<T>(m, k);
    let partial_bytes = k.div_ceil(chunk) * m * n * std::mem::size_of::<T>();
    k >= 2 * chunk && partial_bytes <= MAX_PARTIAL_BYTES
}

/// Rows of the reduction a task of [`gemm_split_reduction`] takes, for an output `m` rows
/// tall and a reduction `k` long: a function of the shapes alone.
fn reduction_chunk<T>(m: usize, k: usize) -> usize {
    let rows = (REDUCTION_CHUNK_BYTES / (m.max(1) * std::mem::size_of::<T>())).max(ROWS_PER_TASK);
    rows.max(k.div_ceil(MAX_REDUCTION_CHUNKS))
}

/// `dst (+)= lhs^T * rhs` for a long reduction (a weight's gradient, summed over every node of
/// a batch or a graph): the reduction is cut into chunks of [`reduction_chunk`] rows, each a
/// product of its own on one thread, and their partial products are added in chunk order.
///
/// The gemm crate threads such a product over its small output (say 128 x 256) and sums each
/// element over the whole reduction in one thread: 96-114 GFLOP/s on two cores against
/// 133-153 cut this way. The chunks depend only on the shapes and are added in a fixed order,
/// so the result does not depend on the thread count.
///
/// The chunks are computed a group at a time, two per thread, and each group is folded into
/// the running sums before the next: the partial products then take a few outputs' worth of
/// memory rather than one per chunk (a GraphSAGE layer's weight gradient over 20,000 nodes
/// kept 40 of them, 20 MiB that no tensor counted), and the sums, taken in the same order, are
/// the same to the bit.
///
/// # Safety
/// As [`gemm_into`]; `lhs` is transposed and `rhs` is not.
unsafe fn gemm_split_reduction<T: Real>(
    dst: *mut T,
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
    accumulate: bool,
) {
    use rayon::prelude::*;
    let (m, k) = lhs.dims();
    let n = rhs.dims().1;
    let chunk = reduction_chunk::<T>(m, k);
    let chunks = k.div_ceil(chunk);
    // Two chunks a thread, one at least, within the scratch bound (a group's size changes
    // only the memory: the chunks are the same and are added in the same order).
    let threads = rayon::current_num_threads();
    let fit = MAX_GROUP_BYTES / (m * n * std::mem::size_of::<T>()).max(1);
    let group = (2 * threads).min(fit.max(threads)).clamp(1, chunks);
    let mut partials: Vec<T> = crate::alloc::with_capacity(group * m * n);
    // When accumulating, the chunks' sum is kept apart and added to `dst` last, as one sum.
    let mut own_sums: Vec<T> = if accumulate {
        crate::alloc::with_capacity(m * n)
    } else {
        Vec::new()
    };
    let sums = RowsPtr(if accumulate {
        own_sums.as_mut_ptr()
    } else {
        dst
    });
    for first_chunk in (0..chunks).step_by(group) {
        let last_chunk = (first_chunk + group).min(chunks);
        partials.spare_capacity_mut()[..(last_chunk - first_chunk) * m * n]
            .par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(g, out)| {
                let c = first_chunk + g;
                let (first, last) = (c * chunk, ((c + 1) * chunk).min(k));
                // Rows first..last of the reduction: of `lhs`, stored [k, m], and `rhs`, [k, n].
                fn rows<T>(op: Operand<'_, T>, first: usize, last: usize) -> Operand<'_, T> {
                    Operand {
                        data: &op.data[first * op.cols..last * op.cols],
                        rows: last - first,
                        ..op
                    }
                }
                // SAFETY: `out` is this task's own m * n elements, written (not read) by a
                // product that does not accumulate.
                unsafe {
                    gemm_one(
                        out.as_mut_ptr().cast::<T>(),
                        rows(lhs, first, last),
                        rows(rhs, first, last),
                        false,
                        gemm::Parallelism::None,
                    )
                };
            });
        // SAFETY: the group's chunks' m * n elements each were written above.
        let parts = unsafe {
            std::slice::from_raw_parts(partials.as_ptr(), (last_chunk - first_chunk) * m * n)
        };
        let sums = &sums;
        (0..m).into_par_iter().for_each(|i| {
            // SAFETY: row i of the sums (`dst`'s own, or `own_sums`, m * n elements either way)
            // is this task's alone; it was written by the groups before this one.
            let row = unsafe { std::slice::from_raw_parts_mut(sums.get().add(i * n), n) };
            for c in first_chunk..last_chunk {
                let g = c - first_chunk;
                let part_row = &parts[(g * m + i) * n..(g * m + i + 1) * n];
                if c == 0 {
                    row.copy_from_slice(part_row);
                } else {
                    for (s, &p) in row.iter_mut().zip(part_row) {
                        *s += p;
                    }
                }
            }
        });
    }
    if accumulate {
        // SAFETY: every chunk's sum was written into `own_sums` above.
        unsafe { own_sums.set_len(m * n) };
        let out = RowsPtr(dst);
        let sums = &own_sums;
        (0..m).into_par_iter().for_each(|i| {
            // SAFETY: row i of `dst` is this task's alone, initialised as the caller promised.
            let row = unsafe { std::slice::from_raw_parts_mut(out.get().add(i * n), n) };
            for (o, &s) in row.iter_mut().zip(&sums[i * n..(i + 1) * n]) {
                *o += s;
            }
        });
        crate::alloc::recycle(own_sums);
    }
    crate::alloc::recycle(partials);
}

/// One call of the gemm crate, threaded as `parallelism` says (in equal shares).
///
/// # Safety
/// As [`gemm_into`].
unsafe fn gemm_one<T: Real>(
    dst: *mut T,
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
    accumulate: bool,
    parallelism: gemm::Parallelism,
) {
    let (m, k) = lhs.dims();
    let (k2, n) = rhs.dims();
    debug_assert_eq!(k, k2);
    debug_assert_eq!(lhs.data.len(), lhs.rows * lhs.cols);
    debug_assert_eq!(rhs.data.len(), rhs.rows * rhs.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m * n {
                // SAFETY: dst holds m*n elements (the caller's promise).
                unsafe { dst.add(i).write(T::ZERO) };
            }
        }
        return;
    }
    let (lcs, lrs) = lhs.strides();
    let (rcs, rrs) = rhs.strides();
    // SAFETY: the operands cover m*k and k*n elements with the strides given, dst m*n (the
    // caller's promise); gemm reads dst only when told to accumulate.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            n as isize,
            accumulate,
            lhs.data.as_ptr(),
            lcs,
            lrs,
            rhs.data.as_ptr(),
            rcs,
            rrs,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// `acc + lhs * rhs` (`[m, n]`) in a new buffer: a copy of `acc` the product is added onto,
/// or a buffer from the cache the product is written into without zeroing it first.
fn product<T: Real + Element>(
    acc: Option<&[T]>,
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
) -> Vec<T> {
    let (m, n) = (lhs.dims().0, rhs.dims().1);
    match acc {
        Some(acc) => {
            let mut out = crate::alloc::copy_of(acc);
            // SAFETY: `out` holds the m*n initialised elements of `acc`.
            unsafe { gemm_into(out.as_mut_ptr(), lhs, rhs, true) };
            out
        }
        None => {
            let mut out = crate::alloc::with_capacity(m * n);
            // SAFETY: `out` has room for m*n elements, and a gemm that does not accumulate
            // writes every one of them.
            unsafe {
                gemm_into(out.as_mut_ptr(), lhs, rhs, false);
                out.set_len(m * n);
            }
            out
        }
    }
}

fn widen(x: &[bf16]) -> Vec<f32> {
    crate::kernels::elementwise::map_vec(x, bf16::to_f32)
}

/// The product of two matrices, `op(a) * op(b)` where `op` transposes when asked.
///
/// `a` and `b` must be 2-D and of one dtype (f32, f64 or bf16). The result has their dtype.
pub fn matmul(a: &Tensor, b: &Tensor, transpose_a: bool, transpose_b: bool) -> Result<Tensor> {
    matmul_add(None, a, b, transpose_a, transpose_b)
}

/// `a1 * b1 + a2 * b2` (GraphSAGE's two products: a node's own row and its neighbours').
///
/// In f32 and f64 it is one product of `[a1 | a2]` (the operands side by side, a copy) and
/// `[b1; b2]` (stacked): its reduction is twice as long, which the gemm kernel runs faster
/// than two short ones (189 against 147 GFLOP/s for 15,000 x 128 x 256 on two cores), and the
/// output is written once. In bf16 the second product is accumulated onto the first in its
/// own buffer.
pub fn matmul_pair(a1: &Tensor, b1: &Tensor, a2: &Tensor, b2: &Tensor) -> Result<Tensor> {
    fn joined<T: Real + Element>(
        a1: &Tensor,
        b1: &Tensor,
        a2: &Tensor,
        b2: &Tensor,
    ) -> Result<Tensor> {
        let a = side_by_side::<T>(a1, a2)?;
        let mut b = crate::alloc::with_capacity::<T>(b1.numel() + b2.numel());
        b.extend_from_slice(b1.as_slice::<T>()?);
        b.extend_from_slice(b2.as_slice::<T>()?);
        let b = Tensor::from_vec(b, &[b1.dims2().0 + b2.dims2().0, b1.dims2().1])?;
        matmul(&a, &b, false, false)
    }
    product_shape(None, a1, b1, false, false)?;
    let out = product_shape(None, a2, b2, false, false)?;
    if a1.dims2().0 != a2.dims2().0 || b1.dims2().1 != b2.dims2().1 || a1.dtype() != a2.dtype() {
        return Err(Error::ShapeMismatch {
            op: "matmul_pair",
            lhs: a1.shape().to_vec(),
            rhs: vec![out.0, out.1],
        });
    }
    match a1.dtype() {
        DType::F32 => joined::<f32>(a1, b1, a2, b2),
        DType::F64 => joined::<f64>(a1, b1, a2, b2),
        _ => {
            let first = matmul(a1, b1, false, false)?;
            matmul_add_into(first, a2, b2)
        }
    }
}

/// The gradients of `b1` and `b2` in [`matmul_pair`] for the output's gradient `g`:
/// `a1^T g` and `a2^T g`, in f32 and f64 as one product of `[a1 | a2]^T` and `g` (whose
/// output rows are then the two gradients, row views of one buffer).
pub fn matmul_pair_weight_grads(a1: &Tensor, a2: &Tensor, g: &Tensor) -> Result<(Tensor, Tensor)> {
    let k1 = a1.dims2().1;
    let joined = match a1.dtype() {
        DType::F32 => side_by_side::<f32>(a1, a2)?,
        DType::F64 => side_by_side::<f64>(a1, a2)?,
        _ => return Ok((matmul(a1, g, true, false)?, matmul(a2, g, true, false)?)),
    };
    let both = matmul(&joined, g, true, false)?;
    Ok((both.rows(0, k1)?, both.rows(k1, both.dims2().0)?))
}

/// `[a | b]`: the rows of two matrices of one height side by side, in a new buffer.
fn side_by_side<T: Element>(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let ((n, ka), (nb, kb)) = (a.dims2(), b.dims2());
    if n != nb || a.dtype() != b.dtype() {
        return Err(Error::ShapeMismatch {
            op: "side_by_side",
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    let (xs, ys) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
    let width = ka + kb;
    // SAFETY: every row's `ka + kb` elements are written.
    let out = unsafe {
        crate::kernels::elementwise::rows_from_fn::<T>(
            n * width,
            width,
            #[inline(always)]
            |r, row| {
                for (o, &x) in row[..ka].iter_mut().zip(&xs[r * ka..(r + 1) * ka]) {
                    o.write(x);
                }
                for (o, &y) in row[ka..].iter_mut().zip(&ys[r * kb..(r + 1) * kb]) {
                    o.write(y);
                }
            },
        )
    };
    Tensor::from_vec(out, &[n, width])
}

/// `acc + a * b`, accumulated in `acc`'s own buffer when nothing else shares it (otherwise
/// into a copy, as [`matmul_add`] does).
pub fn matmul_add_into(mut acc: Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    product_shape(Some(&acc), a, b, false, false)?;
    fn accumulate<T: Real + Element>(acc: &mut Tensor, a: &Tensor, b: &Tensor) -> Result<()> {
        let (l, r) = (a.as_slice::<T>()?, b.as_slice::<T>()?);
        let out = acc.as_mut_slice::<T>()?;
        let operand = |data, (rows, cols)| Operand {
            data,
            rows,
            cols,
            transposed: false,
        };
        // SAFETY: `out` holds the m*n initialised elements of the sum (shapes checked above)
        // and is `acc`'s own, aliasing neither operand.
        unsafe {
            gemm_into(
                out.as_mut_ptr(),
                operand(l, a.dims2()),
                operand(r, b.dims2()),
                true,
            )
        };
        Ok(())
    }
    match a.dtype() {
        DType::F32 => accumulate::<f32>(&mut acc, a, b)?,
        DType::F64 => accumulate::<f64>(&mut acc, a, b)?,
        _ => return matmul_add(Some(&acc), a, b, false, false),
    }
    Ok(acc)
}

/// The shape `[m, n]` of `acc + op(a) * op(b)`, or the error of operands that do not fit.
fn product_shape(
    acc: Option<&Tensor>,
    a: &Tensor,
    b: &Tensor,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<(usize, usize)> {
    if a.dtype() != b.dtype() {
        return Err(Error::DTypeMismatch {
            op: "matmul",
            lhs: a.dtype(),
            rhs: b.dtype(),
        });
    }
    let (ar, ac) = a.dims2();
    let (br, bc) = b.dims2();
    let (m, k) = if transpose_a { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if transpose_b { (bc, br) } else { (br, bc) };
    if k != k2 || a.shape().len() != 2 || b.shape().len() != 2 {
        return Err(Error::ShapeMismatch {
            op: "matmul",
            lhs: a.shape().to_vec(),
            rhs: b.shape().to_vec(),
        });
    }
    if let Some(acc) = acc {
        if acc.dtype() != a.dtype() || acc.dims2() != (m, n) {
            return Err(Error::ShapeMismatch {
                op: "matmul_add",
                lhs: acc.shape().to_vec(),
                rhs: vec![m, n],
            });
        }
    }
    Ok((m, n))
}

/// `acc + op(a) * op(b)`, the product accumulated onto a copy of `acc` by the gemm kernel
/// itself, which saves the separate pass of an addition.
pub fn matmul_add(
    acc: Option<&Tensor>,
    a: &Tensor,
    b: &Tensor,
    transpose_a: bool,
    transpose_b: bool,
) -> Result<Tensor> {
    let (m, n) = product_shape(acc, a, b, transpose_a, transpose_b)?;
    let ((ar, ac), (br, bc)) = (a.dims2(), b.dims2());
    fn operand<T>(data: &[T], (rows, cols): (usize, usize), transposed: bool) -> Operand<'_, T> {
        Operand {
            data,
            rows,
            cols,
            transposed,
        }
    }
    match a.dtype() {
        DType::F32 => {
            let (l, r) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
            let acc = acc.map(|acc| acc.as_slice::<f32>()).transpose()?;
            let out = product(
                acc,
                operand(l, (ar, ac), transpose_a),
                operand(r, (br, bc), transpose_b),
            );
            Tensor::from_vec(out, &[m, n])
        }
        DType::F64 => {
            let (l, r) = (a.as_slice::<f64>()?, b.as_slice::<f64>()?);
            let acc = acc.map(|acc| acc.as_slice::<f64>()).transpose()?;
            let out = product(
                acc,
                operand(l, (ar, ac), transpose_a),
                operand(r, (br, bc), transpose_b),
            );
            Tensor::from_vec(out, &[m, n])
        }
        DType::BF16 => {
            let (l, r) = (a.as_slice::<bf16>()?, b.as_slice::<bf16>()?);
            let product = matmul_bf16(
                operand(l, (ar, ac), transpose_a),
                operand(r, (br, bc), transpose_b),
                m,
                n,
            )?;
            match acc {
                Some(acc) => crate::autodiff::ops::add_tensors(&acc.reshape(&[m, n])?, &product),
                None => Ok(product),
            }
        }
        other => Err(Error::UnsupportedDType {
            op: "matmul",
            dtype: other,
        }),
    }
}

fn matmul_bf16(
    a_shape: Operand<'_, bf16>,
    b_shape: Operand<'_, bf16>,
    m: usize,
    n: usize,
) -> Result<Tensor> {
    if a_shape.transposed && !b_shape.transposed {
        // `A^T B`, a weight's gradient `X^T G`: a reduction over the rows of both operands,
        // with a small output. The operands are widened a block of rows at a time and the
        // blocks' products summed in f32, so the widened copies take a few MiB rather than
        // twice the operands' memory (which no tensor counted: 80 MiB for a 512-wide layer
        // over 20,000 nodes).
        let k = a_shape.rows;
        let rows = bf16_block_rows(m + n);
        let mut out32 = vec![0f32; m * n];
        for start in (0..k).step_by(rows) {
            let end = (start + rows).min(k);
            let a32 = widen(&a_shape.data[start * m..end * m]);
            let b32 = widen(&b_shape.data[start * n..end * n]);
            fn block(data: &[f32], rows: usize, cols: usize, transposed: bool) -> Operand<'_, f32> {
                Operand {
                    data,
                    rows,
                    cols,
                    transposed,
                }
            }
            // SAFETY: out32 holds the m*n elements of the product, initialised (zeros).
            unsafe {
                gemm_into(
                    out32.as_mut_ptr(),
                    block(&a32, end - start, m, true),
                    block(&b32, end - start, n, false),
                    true,
                )
            };
        }
        let out = crate::kernels::elementwise::map_vec(&out32, bf16::from_f32);
        return Tensor::from_vec(out, &[m, n]);
    }
    let mut out = crate::alloc::zeros::<bf16>(m * n);
    let a = a_shape.data;
    let b32 = widen(b_shape.data);
    let rhs = Operand {
        data: &b32[..],
        rows: b_shape.rows,
        cols: b_shape.cols,
        transposed: b_shape.transposed,
    };
    if a_shape.transposed {
        // Both transposed (no layer asks for it): the left operand widened whole.
        let a32 = widen(a);
        let lhs = Operand {
            data: &a32[..],
            rows: a_shape.rows,
            cols: a_shape.cols,
            transposed: true,
        };
        let mut out32 = vec![0f32; m * n];
        // SAFETY: out32 holds the m*n elements of the product.
        unsafe { gemm_into(out32.as_mut_ptr(), lhs, rhs, false) };
        out = crate::kernels::elementwise::map_vec(&out32, bf16::from_f32);
    } else {
        let k = a_shape.cols;
        let rows = bf16_block_rows(k + n);
        let mut out32 = vec![0f32; rows.min(m) * n];
        for start in (0..m).step_by(rows) {
            let end = (start + rows).min(m);
            let a32 = widen(&a[start * k..end * k]);
            let lhs = Operand {
                data: &a32[..],
                rows: end - start,
                cols: k,
                transposed: false,
            };
            let block = &mut out32[..(end - start) * n];
            // SAFETY: the block holds the (end - start) * n elements of its rows' product.
            unsafe { gemm_into(block.as_mut_ptr(), lhs, rhs, false) };
            for (o, &v) in out[start * n..end * n].iter_mut().zip(block.iter()) {
                *o = bf16::from_f32(v);
            }
        }
    }
    Tensor::from_vec(out, &[m, n])
}

#[cfg(test)]
mod tests;
