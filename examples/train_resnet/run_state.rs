//! A run's state across processes: the settings a checkpoint records and a resume
//! checks, a resume with nothing left to train, the augmentation in words, the metrics
//! log's epochs, the replicas' checksum and the SIGINT flag.

use anyhow::Result;
use wick::models::{resume, ModelConfig, Session};

use crate::args::Args;
use crate::Plan;

/// The settings that define a run's trajectory, as a checkpoint records them: a resumed
/// run with other values would not continue the same run.
pub(crate) fn trajectory(a: &Args, config: &ModelConfig, plan: &Plan) -> Vec<(String, String)> {
    let derived = vec![
        ("model", config.describe()),
        ("batch", plan.batch.to_string()),
        ("image size", plan.size.to_string()),
        ("seed", a.seed.to_string()),
        ("optimizer", format!("{:?}", a.optimizer)),
        ("lr", a.lr().to_string()),
        ("lr schedule", format!("{:?}", a.lr_schedule)),
        ("momentum", a.momentum().to_string()),
        ("weight decay", a.weight_decay.to_string()),
        ("steps per epoch", plan.per_epoch.to_string()),
        ("augmentation", augmentation_text(a)),
        ("clip grad norm", format!("{:?}", a.clip_grad_norm)),
        ("no decay 1d", a.no_decay_1d.to_string()),
        (
            "synthetic classes",
            a.synthetic_classes(config.num_classes())
                .map_or_else(|e| e.to_string(), |k| k.to_string()),
        ),
        ("dropout", format!("{:?}", a.model.dropout)),
        (
            "stochastic depth",
            format!("{:?}", a.model.stochastic_depth),
        ),
    ];
    // Then every flag as the command line set it, from the parser's definitions.
    derived
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .chain(
            crate::fingerprint::of_this_run()
                .into_iter()
                .map(|(flag, v)| (format!("flag {flag}"), v)),
        )
        .collect()
}

/// With --resume: loads the newest checkpoint's weights, buffers and counters, after
/// checking that it comes from the same run (the settings [`trajectory`] lists, unless
/// --resume-override). Returns its state; its step comes from its content.
pub(crate) fn resume_from(
    a: &Args,
    plan: &Plan,
    session: &mut Session,
) -> Result<Option<resume::TrainingState>> {
    let Some(dir) = &a.resume else {
        return Ok(None);
    };
    // A checkpoint folder itself, or the folder of a run's step-<N> checkpoints (then the
    // latest).
    let (at, ckpt) = if resume::is_checkpoint(dir) {
        let at = dir
            .file_name()
            .and_then(|n| n.to_str()?.strip_prefix("step-")?.parse().ok());
        (at, dir.clone())
    } else {
        let (at, ckpt) = resume::periodic(dir)?.pop().ok_or_else(|| {
            anyhow::anyhow!(
                "--resume {}: no complete checkpoint there: neither a checkpoint folder (model.safetensors and training.safetensors) nor a folder of step-<N> checkpoints",
                dir.display()
            )
        })?;
        (Some(at), ckpt)
    };
    let state = resume::load(session, &ckpt)?;
    for (name, now) in plan.trajectory.clone() {
        let Some(then) = state.fields.get(&format!("run.{name}")) else {
            continue; // a checkpoint from before these were recorded
        };
        if *then != now && !a.resume_override {
            anyhow::bail!(
                "--resume {}: the checkpoint's run has {name} {then}, this one {now}: resuming would not continue that run (pass --resume-override to resume anyway)",
                ckpt.display()
            );
        }
    }
    if state.fields.get("seed") != Some(&a.seed.to_string()) && !a.resume_override {
        anyhow::bail!(
            "--resume {}: the checkpoint was trained with --seed {}, not {}",
            ckpt.display(),
            state.fields.get("seed").map_or("?", |s| s.as_str()),
            a.seed
        );
    }
    if plan.lead() {
        if let Some(at) = at.filter(|&at| at != state.step) {
            println!(
                "note: {} holds step {}; its folder name says {at}: resuming at step {}",
                ckpt.display(),
                state.step,
                state.step
            );
        }
        println!("resumed from {} at step {}", ckpt.display(), state.step);
    }
    Ok(Some(state))
}

/// Whether `dir` is one checkpoint (its model and training state), not a run's folder.
/// A resume at or past the run's target trains nothing. At exactly its end the
/// checkpoint holds the run's final weights, and `--save` writes them: a run killed
/// between its last checkpoint and its `--save` still ends with the file.
pub(crate) fn at_the_end(a: &Args, plan: &Plan, start: usize, session: &Session) -> Result<()> {
    let saved = match (&a.save, start == plan.steps && plan.lead()) {
        (Some(path), true) => {
            session.save_checkpoint(path)?;
            format!("saved {} from it", path.display())
        }
        _ => "nothing written".into(),
    };
    let at = if start == plan.steps {
        "the run's end"
    } else {
        "past the run's"
    };
    println!(
        "--resume: the checkpoint is at step {start}, {at} ({} steps): nothing to train; {saved}",
        plan.steps
    );
    Ok(())
}

/// The best accuracy a resumed run starts from, so that a worse model never replaces
/// `best`: the resumed checkpoint's, or the `best` folder's own in `checkpoints` when
/// higher (a checkpoint at an epoch's end is written before that epoch's evaluation).
/// Minus infinity for a fresh run.
pub(crate) fn carried_best(
    resumed: Option<&resume::TrainingState>,
    checkpoints: Option<&std::path::Path>,
) -> f64 {
    let accuracy = |fields: &std::collections::BTreeMap<String, String>| {
        fields
            .get("best_accuracy")
            .and_then(|b| b.parse::<f64>().ok())
    };
    let best_folder = resumed
        .and(checkpoints)
        .and_then(|dir| resume::read_state(&dir.join("best")).ok())
        .and_then(|s| accuracy(&s.fields));
    resumed
        .and_then(|r| accuracy(&r.fields))
        .into_iter()
        .chain(best_folder)
        .fold(f64::NEG_INFINITY, f64::max)
}

/// The augmentation in force, in words (synthetic data and batch files have none).
pub(crate) fn augmentation_text(a: &Args) -> String {
    let Some(dir) = &a.data_dir else {
        return "none (synthetic data or a batch file)".into();
    };
    if !crate::data::is_cifar(dir) {
        return match a.augmentation() {
            Ok((true, true)) => "RandomResizedCrop + RandomHorizontalFlip".into(),
            Ok((true, false)) => "RandomResizedCrop, no flip".into(),
            _ => "none (Resize + CenterCrop)".into(),
        };
    }
    match a.augmentation() {
        Ok((true, true)) => "random crop (4-pixel padding) + horizontal flip".into(),
        Ok((true, false)) => "random crop (4-pixel padding), no flip".into(),
        Ok((false, true)) => "horizontal flip, no crop".into(),
        _ => "none".into(),
    }
}

/// The epoch of a metrics-log line (`{"epoch":N,...}`).
pub(crate) fn logged_epoch(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("{\"epoch\":")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Every parameter summed in one fixed order: equal on all ranks when the replicas agree
/// (batch-norm statistics are per rank, so they are left out).
pub(crate) fn parameter_checksum(session: &Session) -> Result<f64> {
    let mut params: Vec<_> = session.state_dict()?.into_iter().collect();
    params.sort_by(|x, y| x.0.cmp(&y.0));
    let mut sum = 0f64;
    for (name, t) in params {
        if !name.ends_with("num_batches_tracked") && !name.contains("running_") {
            let values = t.flatten_all()?.to_dtype(wick::candle_core::DType::F64)?;
            sum += values.to_vec1::<f64>()?.iter().sum::<f64>();
        }
    }
    Ok(sum)
}

/// Set when the process gets SIGINT (Ctrl-C): the loop then saves a checkpoint after
/// the step in progress and exits, instead of dying mid-step.
pub(crate) fn interrupted_flag() -> &'static std::sync::atomic::AtomicBool {
    static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    extern "C" fn on_sigint(_: libc::c_int) {
        STOP.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
    }
    &STOP
}
