//! Every layout x location x backend gathers and scatters exactly as a plain array would; saved
//! parts load back bit-exactly at other world sizes; bad input gets clear errors. The same
//! scenario runs under the local backend (1, 2 and 4 ranks) and under MPI (2 and 4 processes).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use graphloom_comm::{Communicator, Local};
use graphloom_store::{
    check_support, part_paths, Layout, Location, StoreError, StoreSpec, StoreTensor, Topology,
};
use graphloom_tensor::{DType, Tensor};
use half::bf16;

type Comm = Arc<dyn Communicator>;

/// A directory every rank of the job sees: created by rank 0, its path broadcast.
fn shared_dir(comm: &Comm, name: &str) -> PathBuf {
    let path = if comm.rank() == 0 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("graphloom-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.to_string_lossy().into_owned()
    } else {
        String::new()
    };
    PathBuf::from(String::from_utf8(comm.broadcast(0, path.into_bytes()).unwrap()).unwrap())
}

/// The value the plain reference array holds at (row, col): small integers, exact in bf16.
fn value(row: usize, col: usize) -> f64 {
    ((row * 7 + col * 3) % 200) as f64 - 50.0
}

/// The reference rows `ids` as a tensor of `dtype` and `shape[1..]`.
fn reference(ids: &[i64], row_shape: &[usize], dtype: DType) -> Tensor {
    let width = row_shape.iter().product::<usize>();
    let values: Vec<f64> = ids
        .iter()
        .flat_map(|&id| (0..width).map(move |c| value(id as usize, c)))
        .collect();
    let mut shape = vec![ids.len()];
    shape.extend_from_slice(row_shape);
    match dtype {
        DType::I64 => Tensor::from_vec(values.iter().map(|&v| v as i64).collect(), &shape).unwrap(),
        DType::BF16 => Tensor::from_vec(
            values
                .iter()
                .map(|&v| bf16::from_f64(v))
                .collect::<Vec<_>>(),
            &shape,
        )
        .unwrap(),
        other => Tensor::from_f64(&values, &shape, other).unwrap(),
    }
}

/// A stream of pseudo-random ids in `0..rows` (with repeats), different on every rank.
fn random_ids(rows: usize, count: usize, seed: u64) -> Vec<i64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..count)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % rows as u64) as i64
        })
        .collect()
}

fn locations(dir: &Path, tag: &str) -> Vec<Location> {
    vec![
        Location::Host,
        Location::SharedHost,
        Location::Mmap {
            path: dir.join(format!("{tag}.bin")),
            writable: true,
        },
    ]
}

/// Creates a tensor where supported, fills it by scatters that cross ranks, and checks gathers,
/// the local chunk and save/load against the plain array.
fn layouts_and_locations(comm: &Comm) -> Result<(), StoreError> {
    let dir = shared_dir(comm, "store");
    let node = comm.node()?;
    let one_process = comm.share_handles(Arc::new(()))?.is_some();
    let topology = Topology {
        ranks: comm.size(),
        ranks_on_node: node.size(),
        one_process,
    };
    let cases: [(&[usize], DType); 3] = [
        (&[1001, 5], DType::F32),
        (&[777], DType::I64),
        (&[513, 3], DType::BF16),
    ];
    let mut checked = 0;
    for layout in Layout::ALL {
        for (case, &(shape, dtype)) in cases.iter().enumerate() {
            for location in locations(&dir, &format!("{layout}-{case}")) {
                let what = format!("{layout} {location} {dtype} {shape:?}");
                let spec = StoreSpec::new(shape, dtype, layout, location.clone());
                let created = StoreTensor::new(comm.clone(), spec);
                let tensor = match (check_support(layout, &location, topology), created) {
                    (Ok(()), Ok(t)) => t,
                    (Err(_), Err(StoreError::Unsupported(_))) => continue,
                    (expected, got) => {
                        panic!("{what}: support says {expected:?}, new gave {got:?}")
                    }
                };
                check_tensor(comm, &tensor, &dir, &what)?;
                checked += 1;
            }
        }
    }
    // Under separate processes host memory serves only the Distributed layout.
    let refused = if one_process { 0 } else { 2 * cases.len() };
    assert_eq!(checked, 9 * cases.len() - refused);
    comm.barrier()?;
    if comm.rank() == 0 {
        std::fs::remove_dir_all(&dir).unwrap();
        eprintln!("checked {checked} tensors on {} ranks", comm.size());
    }
    Ok(())
}

fn check_tensor(
    comm: &Comm,
    tensor: &StoreTensor,
    dir: &Path,
    what: &str,
) -> Result<(), StoreError> {
    let (rank, size) = (comm.rank(), comm.size());
    let rows = tensor.rows();
    let row_shape = &tensor.shape()[1..];
    let dtype = tensor.dtype();
    // Rank r writes the rows congruent to r mod size (mostly owned by other ranks), in a
    // shuffled order, each first with a wrong value that a later occurrence overwrites.
    let mut mine: Vec<i64> = (0..rows as i64)
        .filter(|i| *i as usize % size == rank)
        .collect();
    mine.reverse();
    let stale: Vec<i64> = mine.iter().copied().step_by(3).collect();
    let mut ids = stale.clone();
    ids.extend_from_slice(&mine);
    let mut rows_tensor = reference(&ids, row_shape, dtype);
    {
        let width = row_shape.iter().product::<usize>() * dtype.size_in_bytes();
        let bytes = rows_tensor.as_mut_bytes();
        for b in &mut bytes[..stale.len() * width] {
            *b = 0x5A;
        }
    }
    tensor.scatter(&ids, &rows_tensor)?;

    let probe = random_ids(rows, 3000, 17 + rank as u64);
    let got = tensor.gather(&probe)?;
    assert_eq!(
        got.as_bytes(),
        reference(&probe, row_shape, dtype).as_bytes(),
        "{what}: gather"
    );
    let all: Vec<i64> = (0..rows as i64).collect();
    let everything = tensor.gather(&all)?;
    assert_eq!(
        everything.as_bytes(),
        reference(&all, row_shape, dtype).as_bytes(),
        "{what}"
    );
    let local: Vec<i64> = tensor.local_rows().map(|r| r as i64).collect();
    assert_eq!(
        tensor.local_bytes(),
        reference(&local, row_shape, dtype).as_bytes(),
        "{what}: local"
    );
    let dl = tensor.local_dlpack()?;
    let view = dl.validate().unwrap();
    assert_eq!(view.shape()[0] as usize, local.len(), "{what}: dlpack rows");
    assert_eq!(
        view.data_ptr() as usize,
        tensor.local_bytes().as_ptr() as usize,
        "{what}: zero copy"
    );

    // An empty gather and an out-of-range id.
    assert_eq!(tensor.gather(&[])?.shape()[0], 0);
    let bad = if tensor.spec().layout == Layout::Distributed {
        // Distributed gathers are collective: every rank passes the same bad id.
        tensor.gather(&[0, rows as i64])
    } else {
        tensor.gather(&[-1])
    };
    assert!(
        matches!(bad, Err(StoreError::OutOfRange { .. })),
        "{what}: {bad:?}"
    );

    // Save, then load the parts into the Distributed layout on host memory.
    let prefix = dir.join(what.replace([' ', '/', ':', '[', ']', ','], "_"));
    tensor.save(&prefix)?;
    let loaded = StoreTensor::from_files(
        comm.clone(),
        &part_paths(&prefix, size),
        row_shape,
        dtype,
        Layout::Distributed,
        Location::Host,
    )?;
    assert_eq!(
        loaded.gather(&probe)?.as_bytes(),
        got.as_bytes(),
        "{what}: reload"
    );
    comm.barrier()?;
    Ok(())
}

/// Saves with one world size and loads with another; checks the file error messages.
fn save_then_load_elsewhere(saving: usize, loading: usize) {
    let dir = std::env::temp_dir().join(format!(
        "graphloom-resize-{}-{saving}-{loading}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("table");
    let rows = 1234;
    for r in Local::run(saving, |comm| {
        let t = StoreTensor::new(
            comm,
            StoreSpec::new(&[rows, 6], DType::F32, Layout::Chunked, Location::Host),
        )?;
        let ids: Vec<i64> = t.local_rows().map(|r| r as i64).collect();
        t.scatter(&ids, &reference(&ids, &[6], DType::F32))?;
        t.save(&prefix).map(drop)
    }) {
        r.unwrap();
    }
    for r in Local::run(loading, |comm| {
        let files = part_paths(&prefix, saving);
        for layout in Layout::ALL {
            let t = StoreTensor::from_files(
                comm.clone(),
                &files,
                &[6],
                DType::F32,
                layout,
                Location::Host,
            )?;
            assert_eq!(t.rows(), rows);
            let all: Vec<i64> = (0..rows as i64).collect();
            assert_eq!(
                t.gather(&all)?.as_bytes(),
                reference(&all, &[6], DType::F32).as_bytes()
            );
        }
        // Parts of a world size that never saved: the missing file is named.
        let err = StoreTensor::from_files(
            comm.clone(),
            &part_paths(&prefix, saving + 1),
            &[6],
            DType::F32,
            Layout::Distributed,
            Location::Host,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(&format!("table_part_0_of_{}", saving + 1)),
            "{err}"
        );
        // Rows of the wrong width: the size is not a whole number of rows.
        let err = StoreTensor::from_files(
            comm,
            &files,
            &[7],
            DType::F32,
            Layout::Distributed,
            Location::Host,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("not a whole number of rows"), "{err}");
        Ok::<(), StoreError>(())
    }) {
        r.unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn local_every_layout_and_location_acts_as_a_plain_array() {
    for size in [1, 2, 4] {
        for r in Local::run(size, |comm| layouts_and_locations(&comm)) {
            r.unwrap();
        }
    }
}

/// Ranks that write the same rows in one scatter race in no layout: every row is written by its
/// owner, and the last write in rank order wins.
#[test]
fn local_ranks_writing_the_same_rows_give_the_last_rank_s_values() {
    for layout in Layout::ALL {
        for result in Local::run(3, |comm| -> Result<(), StoreError> {
            let spec = StoreSpec::new(&[40, 2], DType::F32, layout, Location::Host);
            let t = StoreTensor::new(comm.clone(), spec)?;
            let rank = comm.rank();
            // Every rank writes every row, with its own rank as the value.
            let ids: Vec<i64> = (0..40).collect();
            let rows = Tensor::full(&[40, 2], DType::F32, rank as f64).unwrap();
            t.scatter(&ids, &rows)?;
            let got = t.gather(&ids)?.to_vec_f64();
            assert!(got.iter().all(|&v| v == 2.0), "{layout}: {got:?}");
            Ok(())
        }) {
            result.unwrap();
        }
    }
}

/// A Distributed gather moves 16 MiB of rows per rank per round; with 64 KiB rows, 256 rows a
/// round (were the rounds ever larger than 44 MiB, the counts below would need to grow). Ranks
/// asking for different numbers of rows (one for none, one for several rounds' worth) still
/// agree on the rounds and get every row right.
#[test]
fn local_distributed_gathers_larger_than_a_round_are_exact() {
    const COLUMNS: usize = 16 * 1024;
    const ROWS: usize = 97;
    for result in Local::run(3, |comm| -> Result<(), StoreError> {
        let spec = StoreSpec::new(
            &[ROWS, COLUMNS],
            DType::F32,
            Layout::Distributed,
            Location::Host,
        );
        let t = StoreTensor::new(comm.clone(), spec)?;
        let all: Vec<i64> = (0..ROWS as i64).collect();
        t.scatter(&all, &reference(&all, &[COLUMNS], DType::F32))?;
        let count = [700, 0, 300][comm.rank()];
        let ids = random_ids(ROWS, count, 5 + comm.rank() as u64);
        let got = t.gather(&ids)?;
        assert!(
            got.as_bytes() == reference(&ids, &[COLUMNS], DType::F32).as_bytes(),
            "rank {}: a gather of {count} rows in rounds differs from the plain array",
            comm.rank()
        );
        Ok(())
    }) {
        result.unwrap();
    }
}

#[test]
fn saved_parts_load_at_another_world_size() {
    save_then_load_elsewhere(4, 2);
    save_then_load_elsewhere(2, 3);
    save_then_load_elsewhere(1, 4);
}

#[test]
fn npy_files_load_and_map_in_place() {
    let dir = std::env::temp_dir().join(format!("graphloom-npy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("feat.npy");
    let ids: Vec<i64> = (0..300).collect();
    let table = reference(&ids, &[4], DType::F32);
    graphloom_io::npy::write(&path, table.as_slice::<f32>().unwrap(), &[300, 4]).unwrap();
    for r in Local::run(3, |comm| {
        let loaded = StoreTensor::from_files(
            comm.clone(),
            std::slice::from_ref(&path),
            &[4],
            DType::F32,
            Layout::Distributed,
            Location::Host,
        )?;
        assert_eq!(loaded.gather(&ids)?.as_bytes(), table.as_bytes());
        for layout in Layout::ALL {
            let mapped = StoreTensor::new(
                comm.clone(),
                StoreSpec::new(
                    &[300, 4],
                    DType::F32,
                    layout,
                    Location::Mmap {
                        path: path.clone(),
                        writable: false,
                    },
                ),
            )?;
            assert_eq!(mapped.gather(&ids)?.as_bytes(), table.as_bytes());
            assert!(mapped
                .local_dlpack()?
                .flags()
                .contains(dlpark::DlpackFlags::READ_ONLY));
            let err = mapped
                .scatter(&[], &reference(&[], &[4], DType::F32))
                .unwrap_err();
            assert!(err.to_string().contains("read-only"), "{err}");
        }
        // A map whose shape disagrees with the file is refused.
        let err = StoreTensor::new(
            comm,
            StoreSpec::new(
                &[301, 4],
                DType::F32,
                Layout::Distributed,
                Location::Mmap {
                    path: path.clone(),
                    writable: false,
                },
            ),
        )
        .unwrap_err();
        assert!(err.to_string().contains("holds 300 rows"), "{err}");
        Ok::<(), StoreError>(())
    }) {
        r.unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ranks_that_disagree_are_refused_with_a_clear_error() {
    let results = Local::run(2, |comm| {
        let rows = if comm.rank() == 0 { 10 } else { 11 };
        StoreTensor::new(
            comm,
            StoreSpec::new(&[rows], DType::F32, Layout::Chunked, Location::Host),
        )
        .map(drop)
    });
    for r in results {
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("ranks disagree") && err.contains("rank 1 passed shape [11]"),
            "{err}"
        );
    }
    // A row partition for a different number of ranks.
    for r in Local::run(2, |comm| {
        StoreTensor::new(
            comm,
            StoreSpec::new(&[10], DType::F32, Layout::Distributed, Location::Host)
                .with_rows_per_rank(vec![3, 3, 4]),
        )
        .map(drop)
    }) {
        let err = r.unwrap_err().to_string();
        assert!(err.contains("one count for each of 2 ranks"), "{err}");
    }
}

#[test]
fn the_support_check_refuses_what_cannot_work() {
    let multi_node = Topology {
        ranks: 4,
        ranks_on_node: 2,
        one_process: false,
    };
    let one_node = Topology {
        ranks: 4,
        ranks_on_node: 4,
        one_process: false,
    };
    let threads = Topology {
        ranks: 4,
        ranks_on_node: 4,
        one_process: true,
    };
    let err = check_support(Layout::Continuous, &Location::SharedHost, multi_node).unwrap_err();
    assert!(
        err.to_string()
            .contains("all ranks must run on one machine"),
        "{err}"
    );
    let err = check_support(Layout::Chunked, &Location::Host, one_node).unwrap_err();
    assert!(err.to_string().contains("host memory is private"), "{err}");
    assert!(check_support(Layout::Chunked, &Location::SharedHost, one_node).is_ok());
    assert!(check_support(Layout::Continuous, &Location::Host, threads).is_ok());
    assert!(check_support(Layout::Distributed, &Location::Host, multi_node).is_ok());
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use graphloom_comm::launch::{expect_test_under_mpirun, run_test_under_mpirun};

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_layouts_and_locations() {
        graphloom_comm::mpi::run_rank(|comm| layouts_and_locations(&comm)).unwrap();
    }

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_killed_while_holding_shared_memory() {
        graphloom_comm::mpi::run_rank(|comm| {
            comm.set_timeout(std::time::Duration::from_secs(10));
            let spec = StoreSpec::new(
                &[4096, 64],
                DType::F32,
                Layout::Chunked,
                Location::SharedHost,
            );
            let tensor = StoreTensor::new(comm.clone(), spec)?;
            tensor.barrier()?;
            if comm.rank() == 1 {
                // SAFETY: raise has no preconditions; SIGKILL ends the process at once.
                unsafe { libc::raise(libc::SIGKILL) };
            }
            tensor.barrier()
        })
        .unwrap();
    }

    fn shm_entries() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn mpi_killed_rank_leaves_nothing_in_dev_shm() {
        let before = shm_entries();
        let out = run_test_under_mpirun(3, "mpi::rank_killed_while_holding_shared_memory").unwrap();
        assert!(
            !out.status.success(),
            "the job must fail when a rank is killed"
        );
        // Another MPI job of the suite may run meanwhile: its own segments (OpenMPI's
        // `vader_segment.*`) come and go with it, while what this job left stays.
        let mut new = Vec::new();
        for _ in 0..60 {
            let after = shm_entries();
            new = after.into_iter().filter(|n| !before.contains(n)).collect();
            if new.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        assert!(new.is_empty(), "left in /dev/shm: {new:?}");
    }

    #[test]
    fn mpi_every_layout_and_location_acts_as_a_plain_array() {
        for np in [2, 4] {
            expect_test_under_mpirun(np, "mpi::rank_layouts_and_locations");
        }
    }
}
