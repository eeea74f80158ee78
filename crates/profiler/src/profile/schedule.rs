//! What the profiler records and when: the schedule (which iterations are timed) and the
//! recording level (what is timed in them), values of their own as in PyTorch's profiler.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which iterations the profiler times, with PyTorch's schedule: each cycle skips `wait`
/// iterations, then `warmup` more, then times `active` ones; cycles repeat `repeat` times
/// (0: until the run ends), and iterations after the last cycle are not timed.
/// `active == 0` times every iteration after the first wait and warm-up (one unbounded
/// cycle). SINGA's `skip` is [`Schedule::skip`]: `wait = skip`, every later one timed.
///
/// wick's hooks need no warm-up of their own, so warm-up iterations run untimed like the
/// waiting ones; they are kept apart so that a PyTorch schedule carries over unchanged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    /// Untimed iterations at the start of each cycle.
    pub wait: usize,
    /// Untimed warm-up iterations after the wait.
    pub warmup: usize,
    /// Timed iterations per cycle; 0 for every later one.
    pub active: usize,
    /// Cycles; 0 for as many as the run has.
    pub repeat: usize,
}

impl Schedule {
    /// SINGA's schedule: skips the first `skip` iterations, then times every one.
    pub fn skip(skip: usize) -> Self {
        Schedule {
            wait: skip,
            warmup: 0,
            active: 0,
            repeat: 0,
        }
    }

    /// PyTorch's `schedule(wait, warmup, active, repeat)`.
    pub fn new(wait: usize, warmup: usize, active: usize, repeat: usize) -> Self {
        Schedule {
            wait,
            warmup,
            active,
            repeat,
        }
    }

    /// Whether the iteration that follows `seen` earlier ones is timed.
    pub fn is_timed(&self, seen: usize) -> bool {
        let skipped = self.wait + self.warmup;
        if self.active == 0 {
            return seen >= skipped;
        }
        let cycle = skipped + self.active;
        if self.repeat > 0 && seen >= cycle * self.repeat {
            return false;
        }
        seen % cycle >= skipped
    }

    /// Whether the iteration that brought the count to `seen` ended a cycle that another
    /// follows, starting with untimed iterations (`wait` or `warmup`), in a bounded
    /// schedule (`repeat` of 2 or more): the place for a probe that no timed iteration
    /// waits on.
    pub fn ends_cycle_before_untimed(&self, seen: usize) -> bool {
        let skipped = self.wait + self.warmup;
        if self.active == 0 || skipped == 0 || self.repeat < 2 {
            return false;
        }
        let cycle = skipped + self.active;
        seen.is_multiple_of(cycle) && seen < cycle * self.repeat
    }
}

impl fmt::Display for Schedule {
    /// `wait=W,warmup=U,active=A,repeat=R`, the form [`FromStr`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "wait={},warmup={},active={},repeat={}",
            self.wait, self.warmup, self.active, self.repeat
        )
    }
}

impl FromStr for Schedule {
    type Err = String;

    /// `skip=N` (SINGA), or any of `wait=`, `warmup=`, `active=`, `repeat=` separated by
    /// commas (PyTorch; missing ones are 0).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = Schedule::new(0, 0, 0, 0);
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("schedule `{s}`: `{part}` is not KEY=N"))?;
            let n: usize = value
                .trim()
                .parse()
                .map_err(|_| format!("schedule `{s}`: `{value}` is not a whole number"))?;
            match key.trim() {
                "skip" | "wait" => out.wait = n,
                "warmup" => out.warmup = n,
                "active" => out.active = n,
                "repeat" => out.repeat = n,
                other => {
                    return Err(format!(
                        "schedule `{s}`: unknown key `{other}` (expected skip, wait, warmup, active or repeat)"
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// What the profiler times in a timed iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordLevel {
    /// Nothing (SINGA's verbosity 0).
    Off,
    /// The phases (forward, backward, optimizer), the iteration and the op time inside
    /// each phase (SINGA's verbosity 1).
    Phases,
    /// Also every op (SINGA's verbosity 2 and 3: level 3 differs only in what the report
    /// prints).
    PerOp,
}

impl RecordLevel {
    /// What SINGA's verbosity `v` records.
    pub fn from_verbosity(v: u8) -> Self {
        match v {
            0 => RecordLevel::Off,
            1 => RecordLevel::Phases,
            _ => RecordLevel::PerOp,
        }
    }

    /// The SINGA verbosity whose report shows what this level records.
    pub fn verbosity(self) -> u8 {
        match self {
            RecordLevel::Off => 0,
            RecordLevel::Phases => 1,
            RecordLevel::PerOp => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singa_skip_times_every_iteration_after_it() {
        let s = Schedule::skip(3);
        let timed: Vec<bool> = (0..6).map(|i| s.is_timed(i)).collect();
        assert_eq!(timed, [false, false, false, true, true, true]);
    }

    #[test]
    fn pytorch_cycles_wait_warm_up_time_and_stop_after_repeat() {
        let s: Schedule = "wait=1,warmup=1,active=2,repeat=2".parse().unwrap();
        assert_eq!(s, Schedule::new(1, 1, 2, 2));
        let timed: Vec<usize> = (0..12).filter(|&i| s.is_timed(i)).collect();
        assert_eq!(timed, [2, 3, 6, 7]);
        let forever = Schedule::new(0, 1, 1, 0);
        assert!((0..100).all(|i| forever.is_timed(i) == (i % 2 == 1)));
        assert_eq!(s.to_string().parse::<Schedule>().unwrap(), s);
        assert_eq!("skip=5".parse::<Schedule>().unwrap(), Schedule::skip(5));
        assert!("wait=x".parse::<Schedule>().unwrap_err().contains("`x`"));
        assert!("idle=2"
            .parse::<Schedule>()
            .unwrap_err()
            .contains("unknown key `idle`"));
    }

    #[test]
    fn a_probe_goes_between_cycles_only_before_untimed_iterations() {
        // wait=1, active=2, repeat=3: iterations 1-2, 4-5, 7-8 timed (0-based).
        let s = Schedule::new(1, 0, 2, 3);
        let ends: Vec<usize> = (1..12)
            .filter(|&n| s.ends_cycle_before_untimed(n))
            .collect();
        assert_eq!(ends, [3, 6]); // not after the last cycle
                                  // No untimed iteration to probe in, no bound on the cycles, or no cycles at all.
        for none in [
            Schedule::new(0, 0, 2, 3),
            Schedule::new(1, 0, 2, 0),
            Schedule::skip(2),
        ] {
            assert!(
                (1..20).all(|n| !none.ends_cycle_before_untimed(n)),
                "{none}"
            );
        }
    }

    #[test]
    fn levels_follow_singa_verbosity() {
        assert_eq!(RecordLevel::from_verbosity(0), RecordLevel::Off);
        assert_eq!(RecordLevel::from_verbosity(1), RecordLevel::Phases);
        assert_eq!(RecordLevel::from_verbosity(3), RecordLevel::PerOp);
        assert_eq!(RecordLevel::PerOp.verbosity(), 2);
    }
}
