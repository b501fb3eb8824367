//! The `.npy` reader: headers (versions 1 to 3, every dtype) and bodies, read whole, widened,
//! decoded from bytes and mapped; and the reader of pairs of node ids (`graphloom predict
//! --pairs`).

use std::path::Path;

use graphloom_io::npy::{self, NpyDType, NpyElement};
use graphloom_io::MappedNpy;

use crate::mutate::{case_files, plain, Target};

/// `.npy` files of every dtype and a few shapes (one written with a version 2 header).
pub(crate) fn target() -> Target {
    let dir = std::env::temp_dir().join(format!("graphloom-fuzz-npy-base-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let mut files = Vec::new();
    let mut add = |name: &str, write: &dyn Fn(&Path) -> graphloom_io::Result<()>| {
        let path = dir.join(name);
        write(&path).expect("write a valid .npy");
        files.push((
            name.to_string(),
            std::fs::read(&path).expect("read it back"),
        ));
    };
    add("f32.npy", &|p| {
        npy::write(p, &[0.5f32, -1.0, 2.0, 3.5, 0.0, 1e-3], &[2, 3])
    });
    add("f64.npy", &|p| npy::write(p, &[1.0f64, 2.0, -3.0], &[3]));
    add("i64.npy", &|p| {
        npy::write(p, &[0i64, 7, -1, 1 << 40], &[4, 1])
    });
    add("i32.npy", &|p| npy::write(p, &[5i32, 6], &[2]));
    add("u16.npy", &|p| npy::write(p, &[1u16, 65535, 3, 4], &[2, 2]));
    add("u8.npy", &|p| npy::write(p, &[1u8, 0, 255], &[3]));
    add("i8.npy", &|p| npy::write(p, &[1i8, 0, -1], &[3]));
    add("empty.npy", &|p| npy::write::<f32>(p, &[], &[0, 4]));
    let _ = std::fs::remove_dir_all(&dir);
    // A version 2 header: a 4-byte length.
    let dict = b"{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
    let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
    let pad = (64 - (12 + dict.len() + 1) % 64) % 64;
    v2.extend_from_slice(&((dict.len() + pad + 1) as u32).to_le_bytes());
    v2.extend_from_slice(dict);
    v2.extend(std::iter::repeat_n(b' ', pad));
    v2.push(b'\n');
    for v in [1i32, -2, 3] {
        v2.extend_from_slice(&v.to_le_bytes());
    }
    files.push(("v2.npy".to_string(), v2));
    // A bool mask: numpy's `|b1`, which nothing here writes.
    let mut mask = files
        .iter()
        .find(|(name, _)| name == "u8.npy")
        .expect("u8.npy")
        .1
        .clone();
    let at = mask
        .windows(5)
        .position(|w| w == b"'|u1'")
        .expect("its dtype");
    mask[at + 1..at + 4].copy_from_slice(b"|b1");
    files.push(("bool.npy".to_string(), mask));
    Target {
        name: "npy",
        files,
        encode: plain,
        read,
        alloc_factor: 24,
    }
}

/// Every way of reading every `.npy` file of `dir` as the dtype its header names.
fn read(dir: &Path) -> Vec<String> {
    let mut errors = Vec::new();
    let paths = case_files(dir);
    for p in &paths {
        let mut note = |r: Result<(), graphloom_io::Error>| {
            if let Err(e) = r {
                errors.push(e.to_string());
            }
        };
        let bytes = std::fs::read(p).expect("read the input");
        note(npy::decode_f64(&bytes, p).map(drop));
        let dtype = match npy::read_header(p) {
            Ok(header) => header.dtype,
            Err(e) => {
                note(Err(e));
                continue;
            }
        };
        note(match dtype {
            NpyDType::F32 => read_as::<f32>(p),
            NpyDType::F64 => read_as::<f64>(p),
            NpyDType::U16 => read_as::<u16>(p),
            NpyDType::I32 => read_as::<i32>(p),
            NpyDType::I64 => read_as::<i64>(p),
            NpyDType::U8 => read_as::<u8>(p),
            NpyDType::I8 => read_as::<i8>(p),
            NpyDType::Bool => npy::decode_mask(&bytes, p).map(drop),
        });
        if !matches!(dtype, NpyDType::F32 | NpyDType::F64) {
            note(npy::read_ints(p).map(drop));
        }
        // A valid bool file is no ids: refusing it is no error of the reader.
        if !matches!(dtype, NpyDType::F32 | NpyDType::F64 | NpyDType::Bool) {
            note(npy::read_ids(p).map(drop));
        }
    }
    errors
}

/// Reads `p` whole and mapped as `T`, touching every mapped element, and checks both agree.
fn read_as<T: NpyElement>(p: &Path) -> graphloom_io::Result<()> {
    let whole = npy::read::<T>(p)?;
    let mapped = MappedNpy::<T>::open(p)?;
    let bytes = |values: &[T]| {
        let mut out = Vec::new();
        values.iter().for_each(|&v| v.write_le(&mut out));
        out
    };
    assert_eq!(whole.shape, mapped.shape(), "{}", p.display());
    assert!(
        bytes(&whole.data) == bytes(&mapped),
        "{}: the mapped elements differ from those read",
        p.display()
    );
    Ok(())
}

/// Files of pairs of node ids in each layout [`npy::read_id_pairs`] takes: `[2, P]`, `[P, 2]`,
/// one-byte ids, and a transposed view saved as is (Fortran order).
pub(crate) fn pairs() -> Target {
    let dir =
        std::env::temp_dir().join(format!("graphloom-fuzz-pairs-base-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let bytes = |name: &str, write: &dyn Fn(&Path) -> graphloom_io::Result<()>| {
        let path = dir.join(name);
        write(&path).expect("write a valid .npy");
        std::fs::read(&path).expect("read it back")
    };
    let rows = bytes("rows.npy", &|p| {
        npy::write(p, &[0i64, 1, 2, 3, 4, 5, 6, 7], &[2, 4])
    });
    let pairs = bytes("pairs.npy", &|p| {
        npy::write(p, &[0i32, 3, 1, 4, 2, 5], &[3, 2])
    });
    let small = bytes("small.npy", &|p| {
        npy::write(p, &[9u8, 8, 7, 1, 2, 3], &[2, 3])
    });
    // `pairs.T` of [[0, 3], [1, 4], [2, 5]], saved as is: [2, 3], its body column by column.
    let mut transposed = bytes("transposed.npy", &|p| {
        npy::write(p, &[0i64, 3, 1, 4, 2, 5], &[2, 3])
    });
    let at = transposed
        .windows(5)
        .position(|w| w == b"False")
        .expect("its order");
    transposed[at..at + 5].copy_from_slice(b"True ");
    let _ = std::fs::remove_dir_all(&dir);
    Target {
        name: "pairs",
        files: vec![
            ("rows.npy".into(), rows),
            ("pairs.npy".into(), pairs),
            ("small.npy".into(), small),
            ("transposed.npy".into(), transposed),
        ],
        encode: plain,
        read: read_pairs,
        alloc_factor: 24,
    }
}

/// Reads every file of `dir` as pairs; those read must pair every source with a destination.
fn read_pairs(dir: &Path) -> Vec<String> {
    let paths = case_files(dir);
    let mut errors = Vec::new();
    for p in &paths {
        match npy::read_id_pairs(p) {
            Ok((src, dst)) => assert_eq!(src.len(), dst.len(), "{}", p.display()),
            Err(e) => errors.push(e.to_string()),
        }
    }
    errors
}
