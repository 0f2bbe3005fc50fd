//! A pod host process: `skiff-pod-host --shm PATH --host N`. The same entry
//! point as `skiff pod host`, for the crate's own multi-process tests.

fn main() {
    let result = skiff_pod::HostArgs::parse(std::env::args_os().skip(1))
        .and_then(|a| skiff_pod::host_main(&a));
    if let Err(e) = result {
        eprintln!("skiff-pod-host: {e}");
        std::process::exit(1);
    }
}
