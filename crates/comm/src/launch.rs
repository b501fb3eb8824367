//! Starting MPI jobs from a running program: the `mpirun` command line that works here, for the
//! tests and benchmarks that run a program on several processes.

use std::process::Command;

/// Whether an `mpirun` executable is on the `PATH`.
pub fn mpirun_available() -> bool {
    Command::new("mpirun")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// An `mpirun -np {processes}` command, ready for the program and its arguments.
///
/// More processes than cores are allowed (`OMPI_MCA_rmaps_base_oversubscribe`), and as root
/// OpenMPI's refusal to run is lifted (`OMPI_ALLOW_RUN_AS_ROOT`), so the command works in
/// containers and CI machines. The receive deadline of the parent (`GRAPHLOOM_COMM_TIMEOUT`)
/// passes through to the processes.
pub fn mpirun(processes: usize) -> Command {
    let mut command = Command::new("mpirun");
    command
        .arg("-np")
        .arg(processes.to_string())
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        command
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    command
}

/// Runs the ignored test `entry` of the current test binary as an `mpirun` job of `processes`
/// processes, each running only that test, and returns the job's output. Test suites use it to
/// run one scenario under MPI next to the same scenario under the local backend.
pub fn run_test_under_mpirun(
    processes: usize,
    entry: &str,
) -> std::io::Result<std::process::Output> {
    let exe = std::env::current_exe()?;
    mpirun(processes)
        .arg(exe)
        .args([
            entry,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
}

/// [`run_test_under_mpirun`], panicking with the job's output unless every process succeeded.
pub fn expect_test_under_mpirun(processes: usize, entry: &str) {
    let out = run_test_under_mpirun(processes, entry).expect("starting mpirun");
    assert!(
        out.status.success(),
        "{entry} on {processes} processes failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
