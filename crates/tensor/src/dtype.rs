//! Element types: the runtime [`DType`] tag and the compile-time traits kernels are generic over.
//!
//! Kernels are written once over [`Float`] and instantiated for `f32`, `f64` and `bf16`. A `bf16`
//! tensor is stored in 16 bits and every kernel reads it into `f32` ([`Float::Acc`]), computes and
//! accumulates in `f32`, and rounds once when it writes: storage is halved, arithmetic is not.

use half::bf16;
use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Neg, Sub, SubAssign};

use crate::tensor::Buffer;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float: every kernel runs in it, for exact tests.
    F64,
    /// bfloat16 storage with f32 arithmetic.
    BF16,
    /// 32-bit signed integer (indices).
    I32,
    /// 64-bit signed integer (indices, offsets).
    I64,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::BF16 => 2,
        }
    }

    /// The lower-case name used on the command line and in `meta.json`.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::I64 => "i64",
        }
    }

    /// Parses [`DType::name`] (also accepts numpy's `float32`, `float64`, `bfloat16`, `int32`, `int64`).
    pub fn parse(name: &str) -> Option<DType> {
        Some(match name {
            "f32" | "float32" => DType::F32,
            "f64" | "float64" => DType::F64,
            "bf16" | "bfloat16" => DType::BF16,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            _ => return None,
        })
    }

    /// Whether the dtype holds floating-point values.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A type that can be the element of a tensor buffer.
pub trait Element: Copy + Send + Sync + 'static {
    /// The runtime tag.
    const DTYPE: DType;
    /// The zero value.
    const ZERO: Self;
    /// Wraps a vector into the matching buffer variant.
    fn into_buffer(v: Vec<Self>) -> Buffer;
    /// Borrows a buffer as a slice of this type, if the variant matches.
    fn from_buffer(b: &Buffer) -> Option<&[Self]>;
    /// Mutably borrows a buffer as a slice of this type, if the variant matches.
    fn from_buffer_mut(b: &mut Buffer) -> Option<&mut [Self]>;
}

macro_rules! element {
    ($t:ty, $variant:ident, $zero:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            const ZERO: Self = $zero;
            fn into_buffer(v: Vec<Self>) -> Buffer {
                Buffer::$variant(v)
            }
            fn from_buffer(b: &Buffer) -> Option<&[Self]> {
                match b {
                    Buffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn from_buffer_mut(b: &mut Buffer) -> Option<&mut [Self]> {
                match b {
                    Buffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
element!(f32, F32, 0.0);
element!(f64, F64, 0.0);
element!(bf16, BF16, bf16::ZERO);
element!(i32, I32, 0);
element!(i64, I64, 0);

/// The arithmetic type kernels accumulate in: `f32` or `f64`.
pub trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + fmt::Debug
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + 'static
{
    /// 0.
    const ZERO: Self;
    /// 1.
    const ONE: Self;
    /// Negative infinity, the identity of max.
    const NEG_INFINITY: Self;
    /// Converts from f64 (rounding for f32).
    fn from_f64(v: f64) -> Self;
    /// Widens to f64.
    fn to_f64(self) -> f64;
    /// e^x.
    fn exp(self) -> Self;
    /// e^x without a branch or a library call, so that loops over it vectorize: a polynomial
    /// within 2 ulp of e^x for f32 over [-87, 88] (inputs outside are clamped to it); the
    /// library's `exp` for f64, where accuracy comes first.
    fn exp_branchless(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// The larger of two values.
    fn max(self, other: Self) -> Self;
    /// Whether the value is neither infinite nor NaN.
    fn is_finite(self) -> bool;
}

/// e^x for f32 as Cephes computes it: x = n ln 2 + r with |r| <= ln 2 / 2, a degree-6
/// polynomial for e^r, and 2^n put into the exponent bits. Every step is arithmetic or a bit
/// move (n is rounded by adding 1.5 * 2^23), so a loop over it vectorizes.
#[inline(always)]
fn exp_f32_branchless(x: f32) -> f32 {
    const ROUNDER: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let t = x * std::f32::consts::LOG2_E + ROUNDER;
    let n = t - ROUNDER;
    // The low mantissa bits of t hold n: |n| <= 127.
    let n_int = t.to_bits() as i32 - ROUNDER.to_bits() as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    er * f32::from_bits(((n_int + 127) << 23) as u32)
}

macro_rules! real {
    ($t:ty, $exp_branchless:expr) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn exp_branchless(self) -> Self {
                $exp_branchless(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
        }
    };
}
real!(f32, exp_f32_branchless);
real!(f64, f64::exp);

/// A floating-point storage type: `f32`, `f64` or `bf16`.
pub trait Float: Element + Default {
    /// The type arithmetic is done in.
    type Acc: Real;
    /// Widens to the arithmetic type.
    fn to_acc(self) -> Self::Acc;
    /// Rounds from the arithmetic type.
    fn from_acc(v: Self::Acc) -> Self;
}

impl Float for f32 {
    type Acc = f32;
    #[inline(always)]
    fn to_acc(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_acc(v: f32) -> Self {
        v
    }
}

impl Float for f64 {
    type Acc = f64;
    #[inline(always)]
    fn to_acc(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_acc(v: f64) -> Self {
        v
    }
}

impl Float for bf16 {
    type Acc = f32;
    #[inline(always)]
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn from_acc(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Runs `$body` with `$T` bound to the Rust type of the float dtype `$dtype`, or returns
/// [`Error::UnsupportedDType`](crate::Error::UnsupportedDType) naming `$op` for integer dtypes.
#[macro_export]
macro_rules! with_float {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::BF16 => {
                type $T = $crate::bf16;
                $body
            }
            other => Err($crate::Error::UnsupportedDType {
                op: $op,
                dtype: other,
            }),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_branchless_f32_exp_is_within_two_ulp_of_the_f64_exp() {
        // 2M points from -87 to 88, against e^x in f64 rounded to f32.
        let points = 2_000_000;
        let mut worst = 0;
        for i in 0..=points {
            let x = (-87.0 + 175.0 * i as f64 / points as f64) as f32;
            let want = (x as f64).exp() as f32;
            let got = x.exp_branchless();
            let ulps = (i64::from(got.to_bits()) - i64::from(want.to_bits())).unsigned_abs();
            assert!(ulps <= 2, "exp({x}) = {got}, want {want}: {ulps} ulp");
            worst = worst.max(ulps);
        }
        assert!(
            worst >= 1,
            "a polynomial is not exact everywhere: the sweep compared nothing"
        );
        // Clamped outside the range: finite, and tiny or huge as e^x is.
        assert!((-200.0f32).exp_branchless() < 1e-37);
        assert!(200.0f32.exp_branchless().is_finite());
        assert_eq!(2.0f64.exp_branchless(), 2.0f64.exp());
    }
}
