//! The collectives and point-to-point calls, checked against values computed by hand, under the
//! local backend with 1, 2 and 4 ranks and under MPI with 2 and 4 processes; and the failure
//! paths: a rank that fails mid-collective or stalls is named in every other rank's error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use graphloom_comm::{CommError, Communicator, CommunicatorExt, Local, ReduceData, ReduceOp};

type Comm = Arc<dyn Communicator>;

/// Every collective on one communicator, with results checked on every rank.
fn collectives(comm: &Comm) -> Result<(), CommError> {
    let (rank, size) = (comm.rank(), comm.size());
    comm.barrier()?;

    let root = size - 1;
    let data = if rank == root {
        vec![7u8, 8, 9]
    } else {
        vec![]
    };
    assert_eq!(comm.broadcast(root, data)?, vec![7, 8, 9]);

    // Ranks contribute different lengths.
    let gathered = comm.all_gather_typed(&vec![rank as i64; rank + 1])?;
    for (r, v) in gathered.iter().enumerate() {
        assert_eq!(v, &vec![r as i64; r + 1]);
    }

    // Rank r sends q+1 copies of 100r+q to rank q.
    let sends: Vec<Vec<i64>> = (0..size)
        .map(|q| vec![(100 * rank + q) as i64; q + 1])
        .collect();
    let received = comm.all_to_all_typed(&sends)?;
    for (src, v) in received.iter().enumerate() {
        assert_eq!(v, &vec![(100 * src + rank) as i64; rank + 1]);
    }

    // Sums in rank order, with more elements than ranks and fewer.
    for len in [1usize, 3, 10] {
        let mut x: Vec<f64> = (0..len).map(|i| (rank * 10 + i) as f64 + 0.25).collect();
        comm.all_reduce(ReduceData::F64(&mut x), ReduceOp::Sum)?;
        for (i, v) in x.iter().enumerate() {
            let expected: f64 = (0..size).map(|r| (r * 10 + i) as f64 + 0.25).sum();
            assert_eq!(*v, expected);
        }
    }
    let mut x = vec![rank as f32, -(rank as f32)];
    comm.all_reduce(ReduceData::F32(&mut x), ReduceOp::Max)?;
    assert_eq!(x, vec![(size - 1) as f32, 0.0]);
    let mut y = vec![rank as i64 + 5, -(rank as i64)];
    comm.all_reduce(ReduceData::I64(&mut y), ReduceOp::Min)?;
    assert_eq!(y, vec![5, -((size - 1) as i64)]);

    // A ring of tagged non-blocking messages, posted before the matching receive.
    let next = (rank + 1) % size;
    let prev = (rank + size - 1) % size;
    let send = comm.isend(next, 7, vec![rank as u8; 1000 * (rank + 1)])?;
    let recv = comm.irecv(prev, 7)?;
    assert_eq!(recv.wait()?, vec![prev as u8; 1000 * (prev + 1)]);
    send.wait()?;

    // Messages with different tags do not mix, whatever order they are received in.
    if size > 1 {
        if rank == 0 {
            comm.send(1, 1, b"one".to_vec())?;
            comm.send(1, 2, b"two".to_vec())?;
        } else if rank == 1 {
            assert_eq!(comm.recv(0, 2)?, b"two");
            assert_eq!(comm.recv(0, 1)?, b"one");
        }
    }

    // Split into even and odd ranks, ordered by descending rank.
    let sub = comm.split(rank % 2, size - rank)?;
    let members: Vec<usize> = (0..size).filter(|r| r % 2 == rank % 2).rev().collect();
    assert_eq!(sub.size(), members.len());
    assert_eq!(members[sub.rank()], rank);
    let mut z = [rank as i64];
    sub.all_reduce(ReduceData::I64(&mut z), ReduceOp::Sum)?;
    assert_eq!(z[0], members.iter().sum::<usize>() as i64);
    let node = comm.node()?;
    assert_eq!(
        node.size(),
        size,
        "every rank of these tests runs on one machine"
    );

    // Agreement checks name the rank that differs.
    comm.check_same("test", "same")?;
    if size > 1 {
        let mine = if rank == 1 { "other" } else { "same" };
        let err = comm.check_same("test", mine).unwrap_err().to_string();
        assert!(err.contains("rank 1 passed other"), "{err}");
    }
    assert!(comm.send(size, 0, vec![]).is_err());
    assert!(comm.send(0, 30_000, vec![]).is_err());
    comm.barrier()
}

/// Rank 1 fails between two collectives; every other rank must get an error naming it.
fn one_rank_fails(comm: &Comm) -> Result<(), CommError> {
    comm.set_timeout(Duration::from_secs(20));
    comm.barrier()?;
    if comm.rank() == 1 {
        comm.fail("injected failure");
        return Err(CommError::Invalid("injected failure".into()));
    }
    let mut x = [1.0f64];
    comm.all_reduce(ReduceData::F64(&mut x), ReduceOp::Sum)?;
    Ok(())
}

/// Rank 1 stalls past the others' deadline; they must time out naming it.
fn one_rank_stalls(comm: &Comm) -> Result<(), CommError> {
    comm.barrier()?;
    if comm.rank() == 1 {
        std::thread::sleep(Duration::from_secs(3));
        return Ok(());
    }
    comm.set_timeout(Duration::from_millis(500));
    let mut x = [1.0f64];
    comm.all_reduce(ReduceData::F64(&mut x), ReduceOp::Sum)?;
    Ok(())
}

#[test]
fn local_collectives_match_hand_computed_values() {
    for size in [1, 2, 4] {
        for result in Local::run(size, |comm| collectives(&comm)) {
            result.unwrap();
        }
    }
}

#[test]
fn local_failed_rank_is_named_by_every_other_rank() {
    let start = Instant::now();
    let results = Local::run(4, |comm| one_rank_fails(&comm));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "failure noticed late"
    );
    for (rank, result) in results.iter().enumerate() {
        let err = result.as_ref().unwrap_err().to_string();
        if rank != 1 {
            assert!(err.contains("rank 1 failed"), "rank {rank}: {err}");
        }
    }
}

#[test]
fn local_panicking_rank_is_named_and_the_panic_resurfaces() {
    let outcome = std::panic::catch_unwind(|| {
        Local::run(2, |comm| {
            comm.barrier()?;
            if comm.rank() == 0 {
                panic!("injected panic");
            }
            let err = comm.barrier().unwrap_err().to_string();
            assert!(
                err.contains("rank 0 failed") && err.contains("injected panic"),
                "{err}"
            );
            Ok::<(), CommError>(())
        })
    });
    assert!(outcome.is_err());
}

#[test]
fn local_stalled_rank_is_named_after_the_deadline() {
    let results = Local::run(3, |comm| one_rank_stalls(&comm));
    for (rank, result) in results.iter().enumerate() {
        if rank == 1 {
            continue;
        }
        let err = result.as_ref().unwrap_err().to_string();
        assert!(
            err.starts_with("rank 1 failed: no answer to")
                && err.contains(&format!("rank {rank} was waiting")),
            "{err}"
        );
    }
}

#[cfg(feature = "mpi")]
mod mpi {
    use super::*;
    use graphloom_comm::launch::expect_test_under_mpirun;
    use graphloom_comm::mpi::launched_by_mpirun;

    fn run_job(np: usize, entry: &str) -> std::process::Output {
        graphloom_comm::launch::run_test_under_mpirun(np, entry).expect("starting mpirun")
    }

    fn as_rank(scenario: fn(&Comm) -> Result<(), CommError>) {
        assert!(launched_by_mpirun(), "run by the mpi_ tests under mpirun");
        graphloom_comm::mpi::run_rank(|comm| scenario(&comm)).unwrap();
    }

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_collectives() {
        as_rank(collectives);
    }

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_one_fails() {
        as_rank(one_rank_fails);
    }

    #[test]
    #[ignore = "one rank of an mpirun job, started by the mpi_ tests"]
    fn rank_one_stalls() {
        as_rank(one_rank_stalls);
    }

    #[test]
    fn mpi_collectives_match_hand_computed_values() {
        for np in [2, 4] {
            expect_test_under_mpirun(np, "mpi::rank_collectives");
        }
    }

    #[test]
    fn mpi_failed_rank_aborts_the_job_and_is_named() {
        let start = Instant::now();
        let out = run_job(4, "mpi::rank_one_fails");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            stderr.contains("rank 1 failed: injected failure"),
            "{stderr}"
        );
        assert!(start.elapsed() < Duration::from_secs(60));
    }

    #[test]
    fn mpi_stalled_rank_is_named_after_the_deadline() {
        let out = run_job(3, "mpi::rank_one_stalls");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("rank 1 failed: no answer to"), "{stderr}");
    }
}
