//! The data-parallel launch environment: torchrun's variables, and errors naming a bad one.

#[test]
fn the_launch_environment_is_torchruns_and_bad_values_are_named() {
    use wick_graph::collective::LaunchEnv;
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        LaunchEnv::from_lookup(move |k| {
            pairs
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        })
    };
    let got = env(&[
        ("RANK", "3"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "1234"),
    ])
    .unwrap();
    assert_eq!(
        (
            got.rank,
            got.world_size,
            got.local_rank,
            got.master.as_str()
        ),
        (3, 8, 1, "node0:1234")
    );
    let got = env(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap();
    assert_eq!(
        (got.local_rank, got.master.as_str()),
        (1, "127.0.0.1:29500")
    );
    let e = env(&[("WORLD_SIZE", "2")]).unwrap_err();
    assert!(e.contains("RANK is not set"), "{e}");
    let e = env(&[("RANK", "2"), ("WORLD_SIZE", "2")]).unwrap_err();
    assert!(e.contains("RANK 2 is not below WORLD_SIZE 2"), "{e}");
    let e = env(&[("RANK", "0"), ("WORLD_SIZE", "two")]).unwrap_err();
    assert!(e.contains("WORLD_SIZE=\"two\""), "{e}");
}
