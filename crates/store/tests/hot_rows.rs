//! `HotRows` against the plain mapped table: the same bytes for every way of reading misses,
//! and counters that match a naive count.

use std::collections::BTreeSet;
use std::path::PathBuf;

use graphloom_comm::Local;
use graphloom_io::direct::ReadEngine;
use graphloom_store::{HotRows, Layout, Location, MissReads, StoreSpec, StoreTensor};
use graphloom_tensor::DType;

/// A `.npy` file of `rows` x `dim` f32 values (row r, column c holds r * 1000 + c), removed
/// on drop. Its 128-byte header leaves the rows unaligned to disk blocks.
struct NpyFile(PathBuf);

impl NpyFile {
    fn new(name: &str, rows: usize, dim: usize) -> NpyFile {
        let path = std::env::temp_dir().join(format!(
            "graphloom-hot-rows-{}-{name}.npy",
            std::process::id()
        ));
        let data: Vec<f32> = (0..rows * dim)
            .map(|i| ((i / dim) * 1000 + i % dim) as f32)
            .collect();
        graphloom_io::npy::write(&path, &data, &[rows, dim]).unwrap();
        NpyFile(path)
    }
}

impl Drop for NpyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn mapped(path: &std::path::Path, rows: usize, dim: usize) -> StoreTensor {
    let location = Location::Mmap {
        path: path.to_path_buf(),
        writable: false,
    };
    StoreTensor::new(
        Local::single(),
        StoreSpec::new(&[rows, dim], DType::F32, Layout::Continuous, location),
    )
    .unwrap()
}

#[test]
fn every_way_of_reading_misses_returns_the_rows_of_the_file() {
    // Rows of 100 bytes: most straddle a block boundary somewhere in the file.
    let (rows, dim) = (20_000, 25);
    let file = NpyFile::new("all", rows, dim);
    let plain = mapped(&file.0, rows, dim);
    let hot: Vec<u32> = (0..rows as u32).step_by(7).collect();
    let mut ways = vec![
        MissReads::Mapped,
        MissReads::Direct(None),
        MissReads::Direct(Some(ReadEngine::PreadPool)),
    ];
    if graphloom_io::direct::DirectFile::open(&file.0, Some(ReadEngine::IoUring)).is_ok() {
        ways.push(MissReads::Direct(Some(ReadEngine::IoUring)));
    }
    for reads in ways {
        let cache = HotRows::new(mapped(&file.0, rows, dim), &hot, reads).unwrap();
        assert_eq!(cache.cached_rows(), hot.len());
        assert_eq!(
            cache.direct_engine().is_some(),
            matches!(reads, MissReads::Direct(_))
        );
        let (mut hits, mut misses, mut distinct) = (0u64, 0u64, 0u64);
        for step in 0..6u64 {
            // Repeats, the first and last rows, and a run of neighbours.
            let mut ids: Vec<i64> = (0..3000u64)
                .map(|i| ((i * i * 7919 + step * 104_729) % rows as u64) as i64)
                .collect();
            ids.extend([0, rows as i64 - 1, rows as i64 - 1, 5, 5]);
            ids.extend(1000..1100);
            assert_eq!(
                cache.gather(&ids).unwrap().as_bytes(),
                plain.gather(&ids).unwrap().as_bytes(),
                "{reads:?}, step {step}"
            );
            let missed: Vec<i64> = ids.iter().copied().filter(|&i| i % 7 != 0).collect();
            hits += (ids.len() - missed.len()) as u64;
            misses += missed.len() as u64;
            distinct += missed.iter().collect::<BTreeSet<_>>().len() as u64;
        }
        assert_eq!(cache.hits_and_misses(), (hits, misses), "{reads:?}");
        assert_eq!(cache.rows_read(), distinct, "{reads:?}");
        let err = cache.gather(&[3, rows as i64]).unwrap_err().to_string();
        assert!(err.contains(&rows.to_string()), "{err}");
    }
}

#[test]
fn a_cache_of_every_row_never_reads_the_file() {
    let (rows, dim) = (500, 3);
    let file = NpyFile::new("every", rows, dim);
    let hot: Vec<u32> = (0..rows as u32).rev().collect();
    let cache = HotRows::new(mapped(&file.0, rows, dim), &hot, MissReads::Direct(None)).unwrap();
    let ids: Vec<i64> = (0..rows as i64).collect();
    let got = cache.gather(&ids).unwrap();
    assert_eq!(
        got.as_bytes(),
        mapped(&file.0, rows, dim).gather(&ids).unwrap().as_bytes()
    );
    assert_eq!(cache.rows_read(), 0);
    assert_eq!(cache.hits_and_misses(), (rows as u64, 0));
}

#[test]
fn a_cache_refuses_a_row_twice_or_past_the_table() {
    let (rows, dim) = (50, 4);
    let file = NpyFile::new("refused", rows, dim);
    for (hot, want) in [
        (vec![3u32, 9, 3], "row 3 is cached twice"),
        (vec![2u32, 50], "cached row 50 is not below 50"),
    ] {
        let err = HotRows::new(mapped(&file.0, rows, dim), &hot, MissReads::Mapped)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains(want), "{err}");
    }
}

/// Every rank of a job reads any row through its cache: rank 1 of 2 reads the rows of the
/// whole file, not of its own half (it used to read row v + n/2 for row v, and fault past
/// the map's end for the upper half).
#[test]
fn every_rank_of_a_job_reads_the_rows_it_asks_for() {
    let (rows, dim) = (1000, 8);
    let file = NpyFile::new("ranks", rows, dim);
    let location = Location::Mmap {
        path: file.0.clone(),
        writable: false,
    };
    let spec = StoreSpec::new(&[rows, dim], DType::F32, Layout::Continuous, location);
    let ids: Vec<i64> = vec![0, 999, 500, 499, 3, 777];
    let results = Local::run(2, |comm| {
        let table = StoreTensor::new(comm, spec.clone())?;
        let hot: Vec<u32> = (0..rows as u32).step_by(5).collect();
        let cache = HotRows::new(table, &hot, MissReads::Mapped)?;
        Ok::<_, graphloom_store::StoreError>(cache.gather(&ids)?.to_vec_f64())
    });
    for result in results {
        let got = result.unwrap();
        for (k, &v) in ids.iter().enumerate() {
            let expected: Vec<f64> = (0..dim).map(|c| (v as usize * 1000 + c) as f64).collect();
            assert_eq!(&got[k * dim..(k + 1) * dim], &expected[..], "row {v}");
        }
    }
}
