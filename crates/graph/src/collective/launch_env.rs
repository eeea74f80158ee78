//! Where a rank learns its place in the job: a torchrun-style launcher's environment
//! (the NCCL engine's; MPI's ranks come from `mpirun` itself).

/// The launcher's view of this process: rank, world size and GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// `RANK`.
    pub rank: usize,
    /// `WORLD_SIZE`.
    pub world_size: usize,
    /// `LOCAL_RANK`: the GPU ordinal on this node.
    pub local_rank: usize,
    /// `MASTER_ADDR:MASTER_PORT`, where rank 0 serves the NCCL id.
    pub master: String,
}

impl LaunchEnv {
    /// Reads `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (default: `RANK`), `MASTER_ADDR` (default
    /// 127.0.0.1) and `MASTER_PORT` (default 29500), torchrun's names. An error naming
    /// the variable when one is missing or not a number.
    pub fn from_env() -> Result<Self, String> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) over any lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let number = |k: &str| -> Result<Option<usize>, String> {
            get(k)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("{k}={v:?} is not a non-negative integer"))
                })
                .transpose()
        };
        let rank = number("RANK")?.ok_or("RANK is not set (launch one process per GPU, e.g. with torchrun, which sets RANK, WORLD_SIZE, LOCAL_RANK)")?;
        let world_size = number("WORLD_SIZE")?.ok_or("WORLD_SIZE is not set")?;
        if world_size == 0 || rank >= world_size {
            return Err(format!("RANK {rank} is not below WORLD_SIZE {world_size}"));
        }
        let local_rank = number("LOCAL_RANK")?.unwrap_or(rank);
        let addr = get("MASTER_ADDR").unwrap_or_else(|| "127.0.0.1".into());
        let port = number("MASTER_PORT")?.unwrap_or(29500);
        Ok(LaunchEnv {
            rank,
            world_size,
            local_rank,
            master: format!("{addr}:{port}"),
        })
    }
}
