//! What the two multicloud tests share (`multicloud.rs`, `multicloud_sigkill.rs`): kept apart from
//! `support/mod.rs`, which `moto.rs` uses whole.

use crate::support::{REGION, ZONE};

/// An on-demand AWS offering in moto's region, as a configuration's `[[offerings]]` table.
pub fn aws_offering_toml(id: &str, instance_type: &str, price: &str, gpus: u32) -> String {
    format!(
        "[[offerings]]\nid = \"{id}\"\nprovider = \"aws\"\nregion = \"{REGION}\"\nzone = \"{ZONE}\"\ninstance_type = \"{instance_type}\"\nmarket = \"on-demand\"\nprice_usd_per_hour = \"{price}\"\ngpus = {gpus}\n"
    )
}
