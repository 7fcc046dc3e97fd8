//! `[[budgets]]`: one money ceiling per account and period.

use std::collections::BTreeSet;

use headroom_core::{Budget, Money};

use headroom_core::budget::MOST_CEILING;

use super::Problems;
use super::raw::RawBudget;

pub(super) fn budgets(raw: Vec<RawBudget>, p: &mut Problems) -> Vec<Budget> {
    let mut budgets = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, b) in raw.into_iter().enumerate() {
        let key = format!("budgets[{i}]");
        if !seen.insert(b.account.clone()) {
            p.add(
                &format!("{key}.account"),
                format!("account {} has two budgets", b.account),
                "keep one budget per account",
            );
        }
        p.money(
            &format!("{key}.ceiling_usd"),
            b.ceiling_usd,
            Money::from_micros(1),
            MOST_CEILING,
            "5000",
        );
        if b.soft_threshold_percent == 0 || b.soft_threshold_percent > 100 {
            p.add(
                &format!("{key}.soft_threshold_percent"),
                "must be between 1 and 100",
                "use e.g. 80",
            );
        }
        budgets.push(Budget {
            account: b.account,
            period: b.period,
            ceiling: b.ceiling_usd,
            soft_threshold_percent: b.soft_threshold_percent,
            hard_action: b.hard_action,
        });
    }
    budgets
}
