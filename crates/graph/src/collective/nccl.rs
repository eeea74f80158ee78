//! The NCCL engine (wick's `nccl` feature): NVIDIA's collectives through cudarc, one
//! process per GPU. Ranks come from a torchrun-style launcher's environment: `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK` (the GPU), and `MASTER_ADDR`/`MASTER_PORT`, where rank 0
//! hands NCCL's 128-byte unique id to the others over one TCP connection each (the
//! bootstrap PyTorch's TCPStore does; every collective is NCCL's own).
//!
//! Buffers are staged through the host here (the graph's all-reduce nodes hand over host
//! buffers); the collective runs on a stream of its own, so it overlaps the compute on
//! candle's stream.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use cudarc::nccl::safe::{Comm, Id, ReduceOp};

use super::communicator::Communicator;
use super::launch_env::LaunchEnv;

/// How long the bootstrap waits for rank 0 or for the other ranks.
const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(300);

/// Rank 0 makes NCCL's unique id and sends it to every other rank; the others fetch it.
fn exchange_id(env: &LaunchEnv) -> Result<Id, String> {
    let deadline = Instant::now() + BOOTSTRAP_TIMEOUT;
    if env.rank == 0 {
        let id = Id::new().map_err(|e| format!("ncclGetUniqueId: {e:?}"))?;
        let bytes: Vec<u8> = id.internal().iter().map(|c| *c as u8).collect();
        let listener = TcpListener::bind(&env.master).map_err(|e| {
            format!(
                "rank 0 cannot listen on {} (MASTER_ADDR:MASTER_PORT): {e}",
                env.master
            )
        })?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut served = 0;
        while served + 1 < env.world_size {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
                    stream
                        .write_all(&bytes)
                        .map_err(|e| format!("sending the NCCL id: {e}"))?;
                    served += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "only {served} of {} ranks fetched the NCCL id from {} within {:?}",
                            env.world_size - 1,
                            env.master,
                            BOOTSTRAP_TIMEOUT
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(format!("accepting a rank on {}: {e}", env.master)),
            }
        }
        Ok(id)
    } else {
        loop {
            match TcpStream::connect(&env.master) {
                Ok(mut stream) => {
                    let mut bytes = [0u8; 128];
                    stream
                        .read_exact(&mut bytes)
                        .map_err(|e| format!("reading the NCCL id from {}: {e}", env.master))?;
                    return Ok(Id::uninit(bytes.map(|b| b as std::ffi::c_char)));
                }
                Err(e) => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "rank {} could not reach rank 0 at {} within {:?}: {e}",
                            env.rank, env.master, BOOTSTRAP_TIMEOUT
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
}

/// An NCCL communicator over every rank's GPU, with its own CUDA stream.
pub struct NcclCommunicator {
    comm: Mutex<Comm>,
    device: candle_core::Device,
    stream: Arc<CudaStream>,
    env: LaunchEnv,
}

// SAFETY: every use of the NCCL communicator and of its stream goes through `comm`'s lock;
// cudarc binds the CUDA context to the calling thread in each stream operation.
unsafe impl Send for NcclCommunicator {}
// SAFETY: as above.
unsafe impl Sync for NcclCommunicator {}

impl std::fmt::Debug for NcclCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NcclCommunicator(rank {} of {}, GPU {})",
            self.env.rank, self.env.world_size, self.env.local_rank
        )
    }
}

impl NcclCommunicator {
    /// Joins the job the launcher's environment describes on GPU `LOCAL_RANK`.
    pub fn from_env() -> Result<Self, String> {
        let env = LaunchEnv::from_env()?;
        let device = candle_core::Device::new_cuda(env.local_rank)
            .map_err(|e| format!("GPU {} (LOCAL_RANK): {e}", env.local_rank))?;
        Self::init(env, &device)
    }

    /// Joins the job the launcher's environment describes, on `device` (this rank's GPU,
    /// `LOCAL_RANK`'s): exchanges NCCL's id through rank 0 and initialises the
    /// communicator on a new stream of the device's context.
    pub fn init(env: LaunchEnv, device: &candle_core::Device) -> Result<Self, String> {
        let candle_core::Device::Cuda(cuda) = device else {
            return Err(format!(
                "--dist nccl needs a CUDA device, got {:?} (use --dist mpi on CPUs)",
                device.location()
            ));
        };
        let stream = cuda
            .cuda_stream()
            .context()
            .new_stream()
            .map_err(|e| format!("a stream for NCCL: {e:?}"))?;
        let id = exchange_id(&env)?;
        let comm = Comm::from_rank(stream.clone(), env.rank, env.world_size, id).map_err(|e| {
            format!(
                "ncclCommInitRank (rank {} of {}): {e:?}",
                env.rank, env.world_size
            )
        })?;
        Ok(NcclCommunicator {
            comm: Mutex::new(comm),
            device: device.clone(),
            stream,
            env,
        })
    }
}

impl Communicator for NcclCommunicator {
    fn rank(&self) -> usize {
        self.env.rank
    }

    fn size(&self) -> usize {
        self.env.world_size
    }

    fn engine(&self) -> &'static str {
        "nccl"
    }

    fn device(&self) -> Option<candle_core::Device> {
        Some(self.device.clone())
    }

    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), String> {
        let comm = self.comm.lock().map_err(|_| "the NCCL lock is poisoned")?;
        let mut buf = self
            .stream
            .clone_htod(data)
            .map_err(|e| format!("copy to the GPU: {e:?}"))?;
        comm.all_reduce_in_place(&mut buf, &ReduceOp::Sum)
            .map_err(|e| format!("ncclAllReduce: {e:?}"))?;
        self.stream
            .memcpy_dtoh(&buf, data)
            .map_err(|e| format!("copy from the GPU: {e:?}"))?;
        self.stream
            .synchronize()
            .map_err(|e| format!("waiting for ncclAllReduce: {e:?}"))
    }
}
