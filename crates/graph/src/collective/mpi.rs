//! The MPI engine (wick's `mpi` feature): rsmpi over the system's MPI (Debian's Open MPI).
//! Ranks come from the launcher (`mpirun -np N`).

use std::sync::Mutex;

use mpi::collective::SystemOperation;
use mpi::environment::Universe;
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives as _};
use mpi::Threading;

use super::communicator::Communicator;

/// `MPI_COMM_WORLD` of this process's MPI job. MPI is initialised with
/// `MPI_THREAD_MULTIPLE` where the library has it (at least `MPI_THREAD_SERIALIZED`), and
/// every collective goes through one lock (the graph's communication thread makes them).
/// MPI's default error handler aborts the whole job on a communication error, and
/// [`abort`](Communicator::abort) does not wait for the lock, so a failed or hung peer
/// ends every rank rather than leaving them waiting.
pub struct MpiCommunicator {
    world: Mutex<SimpleCommunicator>,
    /// A second handle on the world, outside the lock, for `MPI_Abort` while a collective
    /// may be blocked holding the lock.
    abort_world: SimpleCommunicator,
    threading: Threading,
    rank: usize,
    size: usize,
    // Finalises MPI when dropped; kept last so the communicator goes first.
    _universe: Universe,
}

// SAFETY: MPI runs at MPI_THREAD_SERIALIZED (checked in `init`): calls may come from any
// thread as long as they are not concurrent, and every call goes through `world`'s lock.
unsafe impl Send for MpiCommunicator {}
// SAFETY: as above; shared references only reach MPI through the lock.
unsafe impl Sync for MpiCommunicator {}

impl std::fmt::Debug for MpiCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MpiCommunicator(rank {} of {}, {:?})",
            self.rank, self.size, self.threading
        )
    }
}

impl MpiCommunicator {
    /// Initialises MPI and joins `MPI_COMM_WORLD`. An error if MPI was initialised
    /// already, or cannot serialise calls from several threads.
    pub fn init() -> Result<Self, String> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or("MPI is initialised already in this process")?;
        if threading < Threading::Serialized {
            return Err(format!(
                "this MPI gives thread level {threading:?}; wick needs Serialized"
            ));
        }
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(MpiCommunicator {
            world: Mutex::new(world),
            abort_world: universe.world(),
            threading,
            rank,
            size,
            _universe: universe,
        })
    }
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn engine(&self) -> &'static str {
        "mpi"
    }

    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), String> {
        let world = self.world.lock().map_err(|_| "the MPI lock is poisoned")?;
        let send = data.to_vec();
        world.all_reduce_into(&send[..], data, SystemOperation::sum());
        Ok(())
    }

    /// `MPI_Allgather` of every rank's values.
    fn all_gather_f64(&self, mine: &[f64]) -> Result<Vec<f64>, String> {
        let world = self.world.lock().map_err(|_| "the MPI lock is poisoned")?;
        let mut all = vec![0f64; mine.len() * self.size];
        world.all_gather_into(mine, &mut all[..]);
        Ok(all)
    }

    /// `MPI_Abort` on the world: every rank ends. Returning instead would finalise MPI,
    /// which waits for the other ranks while they wait in a collective for this one. It
    /// takes the lock when it is free; when a collective holds it (blocked on a failed or
    /// hung peer) it aborts through the second handle, which `MPI_THREAD_MULTIPLE` makes
    /// legal and Open MPI honours at lower levels too.
    fn abort(&self, code: i32) -> ! {
        match self.world.try_lock() {
            Ok(world) => world.abort(code),
            Err(_) => self.abort_world.abort(code),
        }
    }
}
