//! GPU utilisation per ready replica, as the usual exporter reports it.

use std::collections::{BTreeMap, BTreeSet};

use super::Model;

/// GPU utilisation as the usual exporter reports it: per ready replica, the share of the window
/// in which at least one kernel ran, whatever the queue behind it.
#[derive(Debug, Default)]
pub struct UtilMeter {
    last: BTreeMap<String, (f64, f64)>,
}

impl UtilMeter {
    /// Utilisation of each replica ready now over the time since the last reading, in replica
    /// order; `None` for a replica that joined since (no sample yet, as a fresh pod has none).
    pub fn read(&mut self, model: &Model<'_>, now: f64) -> Vec<Option<f64>> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for (id, busy) in model.busy_counters() {
            seen.insert(id.to_string());
            let (busy0, t0) = self.last.get(id).copied().unwrap_or((0.0, f64::NAN));
            if t0.is_finite() && now > t0 {
                out.push(Some(((busy - busy0) / (now - t0)).clamp(0.0, 1.0)));
            } else {
                out.push(None);
            }
            self.last.insert(id.to_string(), (busy, now));
        }
        self.last.retain(|id, _| seen.contains(id));
        out
    }
}
