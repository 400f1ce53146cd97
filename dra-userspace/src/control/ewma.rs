//! Exponentially weighted moving average of CPU samples.

/// EWMA smoothing: `s₀ = x₀`, `sₙ = α·xₙ + (1 − α)·sₙ₋₁`.
///
/// `α = 1` is no smoothing; smaller `α` reacts more slowly (about `1/α` samples to
/// follow a step change by 63 %). Smoothing delays both throttling and its release.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ewma {
    alpha: f64,
    value: Option<f64>,
}

/// An EWMA factor outside `(0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("EWMA alpha {alpha} must be in (0, 1]")]
pub struct InvalidAlpha {
    /// The rejected factor.
    pub alpha: f64,
}

impl Ewma {
    /// An empty average with factor `alpha` in `(0, 1]`.
    pub fn new(alpha: f64) -> Result<Self, InvalidAlpha> {
        if alpha.is_finite() && alpha > 0.0 && alpha <= 1.0 {
            Ok(Self { alpha, value: None })
        } else {
            Err(InvalidAlpha { alpha })
        }
    }

    /// The smoothing factor.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Adds a sample and returns the new average (the sample itself when empty).
    pub fn update(&mut self, x: f64) -> f64 {
        let v = match self.value {
            None => x,
            Some(prev) => self.alpha * x + (1.0 - self.alpha) * prev,
        };
        self.value = Some(v);
        v
    }

    /// The current average, `None` before the first sample or after [`Ewma::reset`].
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Forgets the history (used when the source was missing: the old average is stale).
    pub fn reset(&mut self) {
        self.value = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sample_is_taken_as_is_then_smoothed() {
        let mut e = Ewma::new(0.5).unwrap();
        assert_eq!(e.value(), None);
        assert_eq!(e.update(80.0), 80.0);
        assert_eq!(e.update(40.0), 60.0);
        assert_eq!(e.update(40.0), 50.0);
        e.reset();
        assert_eq!(e.update(10.0), 10.0);
    }

    #[test]
    fn alpha_one_is_no_smoothing() {
        let mut e = Ewma::new(1.0).unwrap();
        e.update(90.0);
        assert_eq!(e.update(12.5), 12.5);
    }

    #[test]
    fn alpha_outside_unit_interval_is_rejected() {
        for a in [0.0, -0.1, 1.01, f64::NAN] {
            assert!(Ewma::new(a).is_err(), "{a}");
        }
    }
}
