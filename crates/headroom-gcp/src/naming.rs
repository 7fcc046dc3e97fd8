//! Names GCP derives from Headroom's identifiers: instance names and request ids from the client
//! token (so a repeated launch is the same request and collides on the same name), labels from
//! the ownership tags, and the exact tags kept in the instance's description.

use headroom_cloud::OwnershipTags;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Namespaces for the UUIDv5s below; fixed forever, or a restart would rename its instances.
const NAME_NAMESPACE: Uuid = Uuid::from_u128(0x6865_6164_726f_6f6d_2d67_6370_2d6e_616d);
const REQUEST_NAMESPACE: Uuid = Uuid::from_u128(0x6865_6164_726f_6f6d_2d67_6370_2d72_6571);

/// Prefix of every instance name this provider creates.
pub const NAME_PREFIX: &str = "hr-";

/// The instance name for a client token: `hr-` and 32 hex digits, a valid GCE name (lowercase,
/// starts with a letter, 35 characters). Names are unique per zone, so a second insert with the
/// same token fails with `alreadyExists` instead of making a second VM, even after the
/// requestId's idempotency window (about an hour on GCE) has passed.
pub fn instance_name(client_token: &str) -> String {
    format!(
        "{NAME_PREFIX}{}",
        Uuid::new_v5(&NAME_NAMESPACE, client_token.as_bytes()).simple()
    )
}

/// The `requestId` for a client token. GCE wants a UUID; the same token gives the same one, so a
/// retried insert is recognised as the same request.
pub fn request_id(client_token: &str) -> String {
    Uuid::new_v5(&REQUEST_NAMESPACE, client_token.as_bytes())
        .hyphenated()
        .to_string()
}

/// A GCE label value: lowercase letters, digits, `_` and `-`, at most 63 characters. Other
/// characters become `_` and upper case is lowered, so labels are lossy: they are for filtering
/// and for people; the exact values live in the description (see [`Description`]).
pub fn label_value(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect()
}

/// The labels an instance carries: the ownership tags (keys are already valid label keys) and
/// the client token.
pub fn labels(tags: &OwnershipTags, client_token: &str) -> Vec<(String, String)> {
    let mut labels: Vec<(String, String)> = tags
        .to_map()
        .into_iter()
        .map(|(k, v)| (k, label_value(&v)))
        .collect();
    labels.push(("headroom-token".to_string(), label_value(client_token)));
    labels
}

/// The labels of an instance to read ownership from (the second source after the description):
/// the token, offering and tags as [`labels`] wrote them, with the cluster the caller asks
/// about when its label matches. `None` unless the cluster, node and token labels are all there
/// (a VM that merely copied the cluster label is not ours).
pub fn ownership_from_labels<'a>(
    get: impl Fn(&str) -> Option<&'a str>,
    cluster: &str,
) -> Option<DescriptionBody> {
    if get("headroom-cluster")? != label_value(cluster) {
        return None;
    }
    let node = get("headroom-node")?.to_string();
    let client_token = get("headroom-token")?.to_string();
    Some(DescriptionBody {
        client_token,
        offering: get(OFFERING_LABEL).unwrap_or_default().to_string(),
        tags: OwnershipTags {
            cluster: cluster.to_string(),
            pool: get("headroom-pool").unwrap_or_default().to_string(),
            node,
            request: get("headroom-request").map(str::to_string),
        },
    })
}

/// The label holding the offering id an instance was launched for.
pub const OFFERING_LABEL: &str = "headroom-offering";

/// What Headroom writes into an instance's `description` at insert: the exact ownership tags,
/// client token and offering, which labels cannot hold losslessly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Description {
    pub headroom: DescriptionBody,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DescriptionBody {
    pub client_token: String,
    pub offering: String,
    pub tags: OwnershipTags,
}

impl Description {
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// `None` for instances Headroom did not create (or whose description was edited).
    pub fn decode(text: &str) -> Option<Description> {
        serde_json::from_str(text).ok()
    }
}

/// An instance id as Headroom stores it: `ZONE/NAME`, since names are unique per zone only and
/// every call needs the zone.
pub fn instance_id(zone: &str, name: &str) -> String {
    format!("{zone}/{name}")
}

/// Splits an id made by [`instance_id`]; `None` for anything else.
pub fn split_instance_id(id: &str) -> Option<(&str, &str)> {
    let (zone, name) = id.split_once('/')?;
    let valid = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    (valid(zone) && valid(name)).then_some((zone, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_request_ids_are_deterministic_and_valid() {
        let a = instance_name("hr-n-0123456789abcdef0123456789abcdef");
        assert_eq!(a, instance_name("hr-n-0123456789abcdef0123456789abcdef"));
        assert_ne!(a, instance_name("hr-n-other"));
        assert_eq!(a.len(), 35);
        assert!(a.starts_with("hr-"));
        let r = request_id("tok");
        assert_eq!(r, request_id("tok"));
        assert!(Uuid::parse_str(&r).is_ok());
        assert_ne!(r, request_id("tok2"));
    }

    #[test]
    fn label_values_are_sanitised() {
        assert_eq!(label_value("Team.ML infra"), "team_ml_infra");
        assert_eq!(label_value(&"x".repeat(80)).len(), 63);
        assert_eq!(label_value("llama-70b_ok"), "llama-70b_ok");
    }

    #[test]
    fn description_round_trips() {
        let d = Description {
            headroom: DescriptionBody {
                client_token: "Tok.1".into(),
                offering: "gcp-a2.spot".into(),
                tags: OwnershipTags {
                    cluster: "C".into(),
                    pool: "p".into(),
                    node: "n".into(),
                    request: Some("r".into()),
                },
            },
        };
        assert_eq!(Description::decode(&d.encode()), Some(d));
        assert_eq!(Description::decode("a VM someone made"), None);
    }

    #[test]
    fn instance_ids_carry_the_zone() {
        let id = instance_id("us-central1-a", "hr-abc");
        assert_eq!(split_instance_id(&id), Some(("us-central1-a", "hr-abc")));
        assert_eq!(split_instance_id("headroom-contract-never-existed"), None);
        assert_eq!(split_instance_id("a/../b"), None);
    }
}
