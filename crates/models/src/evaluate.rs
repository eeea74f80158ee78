//! Evaluation: mean cross-entropy, top-1 and top-5 accuracy of an inference session over
//! batches, counting only each batch's real images (a padded last batch counts its real
//! ones), and the same scores for one batch of logits (training accuracy).

use candle_core::{DType, Device, Tensor};

use crate::error::{ModelError, Result};
use crate::session::Session;

/// Scores summed over images.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Scores {
    /// Images scored.
    pub images: usize,
    /// Sum of their cross-entropy losses (natural log).
    pub loss_sum: f64,
    /// Images whose label is the top class.
    pub top1: usize,
    /// Images whose label is among the five top classes.
    pub top5: usize,
    /// Images whose logits hold a NaN or an infinity (scored as wrong).
    pub non_finite: usize,
}

impl Scores {
    /// Mean loss.
    pub fn loss(&self) -> f64 {
        self.loss_sum / self.images.max(1) as f64
    }
    /// Top-1 accuracy (0..1).
    pub fn top1_accuracy(&self) -> f64 {
        self.top1 as f64 / self.images.max(1) as f64
    }
    /// Top-5 accuracy (0..1).
    pub fn top5_accuracy(&self) -> f64 {
        self.top5 as f64 / self.images.max(1) as f64
    }
    fn add(&mut self, other: Scores) {
        self.images += other.images;
        self.loss_sum += other.loss_sum;
        self.top1 += other.top1;
        self.top5 += other.top5;
        self.non_finite += other.non_finite;
    }
}

/// The scores of the first `real` rows of `logits` (`[N, C]`) against `labels` (`[real]`),
/// in f64 on the host.
pub fn score(logits: &Tensor, labels: &Tensor, real: usize) -> Result<Scores> {
    let logits = logits.to_device(&Device::Cpu)?.to_dtype(DType::F64)?;
    let &[n, classes] = logits.dims() else {
        return Err(ModelError::State(format!(
            "logits must be [N, C], got {:?}",
            logits.dims()
        )));
    };
    let labels: Vec<i64> = labels
        .to_device(&Device::Cpu)?
        .to_dtype(DType::I64)?
        .to_vec1()?;
    if real > n || labels.len() != real {
        return Err(ModelError::State(format!(
            "{real} real images with {} labels for {n} rows of logits",
            labels.len()
        )));
    }
    let rows: Vec<Vec<f64>> = logits.to_vec2()?;
    let mut s = Scores::default();
    for (row, &label) in rows.iter().zip(&labels) {
        let label = usize::try_from(label)
            .ok()
            .filter(|l| *l < classes)
            .ok_or_else(|| ModelError::State(format!("label {label} outside 0..{classes}")))?;
        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        s.loss_sum += lse - row[label];
        // A row with a NaN or an infinity scores nothing: no logit is `>` NaN, so a
        // plain count would call every such row correct.
        let finite = row.iter().all(|v| v.is_finite());
        let above = row.iter().filter(|v| **v > row[label]).count();
        s.top1 += usize::from(finite && above == 0);
        s.top5 += usize::from(finite && above < 5);
        s.non_finite += usize::from(!finite);
        s.images += 1;
    }
    Ok(s)
}

/// Evaluates `session` (an inference session) on `batches` of (images, labels of the real
/// images, real count).
pub fn evaluate(
    session: &mut Session,
    batches: impl IntoIterator<Item = Result<(Tensor, Tensor, usize)>>,
) -> Result<Scores> {
    let mut total = Scores::default();
    for batch in batches {
        let (images, labels, real) = batch?;
        let logits = session.forward(&images)?;
        total.add(score(&logits, &labels, real)?);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_count_real_rows_top1_top5_and_the_loss() {
        let logits = Tensor::new(
            &[
                [5.0f32, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                [9.0, 9.0, 9.0, 9.0, 9.0, 9.0, 9.0],
            ],
            &Device::Cpu,
        )
        .unwrap();
        // Row 0: label 0 is top. Row 1: label 1 is 6th. Row 2 is padding.
        let labels = Tensor::new(&[0i64, 1], &Device::Cpu).unwrap();
        // NaN logits score nothing (no logit is `>` NaN: a plain count calls them right).
        let nan = Tensor::new(&[[f32::NAN, 1.0], [2.0, f32::INFINITY]], &Device::Cpu).unwrap();
        let bad = score(&nan, &labels, 2).unwrap();
        assert_eq!(
            (bad.top1, bad.top5, bad.non_finite, bad.images),
            (0, 0, 2, 2)
        );
        let s = score(&logits, &labels, 2).unwrap();
        assert_eq!((s.images, s.top1, s.top5), (2, 1, 1));
        let row0 = (5f64.exp() + 1f64.exp() + 5.0).ln() - 5.0;
        let row1 = (0..7).map(|v| (v as f64).exp()).sum::<f64>().ln() - 1.0;
        assert!((s.loss_sum - row0 - row1).abs() < 1e-12);
        assert!(
            score(&logits, &labels, 3).is_err(),
            "labels must match the real rows"
        );
    }
}
