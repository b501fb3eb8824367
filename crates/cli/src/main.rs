//! The `graphloom` command: prepare datasets, inspect them, train GNNs and benchmark (the
//! library `graphloom_cli` does the work).

#[global_allocator]
static ALLOCATOR: graphloom_cli::ExitOnOutOfMemory = graphloom_cli::ExitOnOutOfMemory;

fn main() {
    std::process::exit(graphloom_cli::run(std::env::args_os().collect()));
}
