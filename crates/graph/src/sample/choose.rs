//! Choosing which neighbours of one node to keep: uniform k-subsets (Floyd's algorithm) and
//! weighted sampling without replacement (A-Res), from counter-based draws.
//!
//! The draws of a node come from a [`RowKey`] of (seed, epoch, hop, node id) indexed by
//! position, so a node's choice depends on nothing else: not on the thread, the rank or the
//! batch that asks.

use graphloom_tensor::rng::RowKey;

/// A uniform integer in `0..n` from 64 random bits (Lemire's multiply-shift; the bias is below
/// `n / 2^64`).
#[inline(always)]
pub fn below(n: usize, bits: u64) -> usize {
    ((u128::from(bits) * n as u128) >> 64) as usize
}

/// Appends to `out` the positions `0..degree` of a uniformly random `k`-subset (every subset
/// equally likely), in increasing order; all positions when `degree <= k`.
///
/// Floyd's algorithm: for `j` in `degree - k..degree`, draw `t` uniform in `0..=j` and keep `t`,
/// or `j` when `t` is already kept. It draws exactly `k` numbers and needs no copy of the
/// neighbourhood.
pub fn uniform_positions(degree: usize, k: usize, draws: RowKey, out: &mut Vec<u32>) {
    if degree <= k {
        out.extend(0..degree as u32);
    } else if degree <= 64 {
        floyd_word(degree, k, draws, out);
    } else if degree <= BITMAP_DEGREE {
        floyd_bitmap(degree, k, draws, out);
    } else {
        floyd_list(degree, k, draws, out);
    }
}

/// The largest degree whose kept positions [`floyd_bitmap`] marks in a bitmap on the stack.
const BITMAP_DEGREE: usize = 512;

/// Floyd's algorithm on a neighbourhood of at most 64: the kept positions are the bits of one
/// word held in a register.
///
/// A draw already kept becomes `j` by arithmetic on the bits, not a branch: when `k` is near
/// the degree (15 of 20, a first hop on the bench's graph) nearly half the draws collide, at
/// random, and a mispredicted branch cost more than the draw. With the bits in memory each
/// draw also waited for the last one's store.
fn floyd_word(degree: usize, k: usize, draws: RowKey, out: &mut Vec<u32>) {
    let mut kept = 0u64;
    for j in degree - k..degree {
        let t = below(j + 1, draws.bits(j as u64));
        // Keep t, and j too when t was kept already (j is above every kept position, so new);
        // setting t's bit again changes nothing.
        let taken = (kept >> t) & 1;
        kept |= (1u64 << t) | (taken << j);
    }
    push_positions(&[kept], out);
}

/// Floyd's algorithm with the kept positions as bits: each membership test is one bit, and
/// reading the bits in order yields the positions sorted, with no sort. A collision is
/// resolved without a branch, as in [`floyd_word`].
fn floyd_bitmap(degree: usize, k: usize, draws: RowKey, out: &mut Vec<u32>) {
    let mut kept = [0u64; BITMAP_DEGREE / 64];
    for j in degree - k..degree {
        let t = below(j + 1, draws.bits(j as u64));
        // As in `floyd_word`: keep t, and j too when t was kept already.
        let taken = (kept[t / 64] >> (t % 64)) & 1;
        kept[t / 64] |= 1u64 << (t % 64);
        kept[j / 64] |= taken << (j % 64);
    }
    push_positions(&kept[..degree.div_ceil(64)], out);
}

/// Appends the positions of the set bits of `words` (bit `b` of word `w` is position
/// `64 w + b`), in increasing order.
fn push_positions(words: &[u64], out: &mut Vec<u32>) {
    for (w, &bits) in words.iter().enumerate() {
        let mut bits = bits;
        while bits != 0 {
            out.push((w * 64) as u32 + bits.trailing_zeros());
            bits &= bits - 1;
        }
    }
}

/// Floyd's algorithm over a list of the kept positions, for neighbourhoods too large for a
/// bitmap (`k` is small beside them, so the list stays short).
fn floyd_list(degree: usize, k: usize, draws: RowKey, out: &mut Vec<u32>) {
    let start = out.len();
    for j in degree - k..degree {
        let t = below(j + 1, draws.bits(j as u64)) as u32;
        let kept = &out[start..];
        out.push(if kept.contains(&t) { j as u32 } else { t });
    }
    out[start..].sort_unstable();
}

/// Appends to `out` the positions of `k` neighbours drawn without replacement with probability
/// proportional to `weights` (A-Res: keep the `k` largest `ln(u) / w`, which is successive
/// weighted sampling without replacement), in increasing order; all positions when
/// `weights.len() <= k`. Zero weights are chosen last.
pub fn weighted_positions(
    weights: &[f32],
    k: usize,
    draws: RowKey,
    scratch: &mut Vec<(f64, u32)>,
    out: &mut Vec<u32>,
) {
    let degree = weights.len();
    let start = out.len();
    if degree <= k {
        out.extend(0..degree as u32);
        return;
    }
    scratch.clear();
    scratch.extend(weights.iter().enumerate().map(|(i, &w)| {
        // u in (0, 1]: ln(u) is finite and at most 0.
        let u = ((draws.bits(i as u64) >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let key = if w > 0.0 {
            u.ln() / f64::from(w)
        } else {
            f64::NEG_INFINITY
        };
        (key, i as u32)
    }));
    // The k largest keys; ties (only among zero weights) broken by position.
    let by_key = |a: &(f64, u32), b: &(f64, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    scratch.select_nth_unstable_by(k - 1, by_key);
    out.extend(scratch[..k].iter().map(|&(_, i)| i));
    out[start..].sort_unstable();
}
