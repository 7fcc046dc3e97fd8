//! One deployment, several clouds: a provider that routes each call to the cloud of the offering
//! or instance it is about. Pure routing; each member is a provider of its own.
//!
//! Routing:
//! - `launch` goes to the member of `spec.offering.provider`, always: a launch repeated after a
//!   crash (same client token) reaches the same cloud, so its idempotency holds.
//! - Calls by instance id go to the member that answered for that id: learned from launches and
//!   from the last full inventory (`list_owned`), which the engine reads at the start of every
//!   tick. The book is rebuilt from each full inventory, so it holds no more than the live
//!   instances and the launches since.
//! - An id the book does not know (a terminated instance after a restart) is described by every
//!   member. It is routed only when exactly one member knows it and every other answered
//!   `NotFound`; a member that fails to answer might know it too, so the call fails with that
//!   error and the next tick asks again. An id two members both claim (listed or described by
//!   both) is never routed by a guess: calls on it are refused (`AmbiguousInstanceId`), so no
//!   call can stop or terminate another cloud's instance. The providers' ids do not collide
//!   (`i-…`, GCE names, `sim-…`, `sim-<kind>-…`), so this is a guard, not a path.
//!
//! The inventory is read per member (`list_owned_each`): the engine settles the nodes of the
//! clouds that answered and leaves those of a cloud that did not as they were (an instance
//! missing from an inventory is recorded as gone, so a partial `list_owned` would be wrong; it
//! fails as a whole). Price and quota reads fail as a whole when one member fails: the engine
//! then keeps its last answers for every cloud, which is what it would do for the failing one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use headroom_core::{ErrorClass, Money, Offering, OfferingId, ProviderKind};

use crate::provider::{CloudError, CloudProvider, Instance, InstanceId, LaunchSpec, Quotas};

/// A composite of one provider per [`ProviderKind`].
#[derive(Debug)]
pub struct MultiCloud {
    members: BTreeMap<ProviderKind, Arc<dyn CloudProvider>>,
    routes: Mutex<Routes>,
}

#[derive(Debug, Default)]
struct Routes {
    /// The member that answered for each id.
    owner: HashMap<InstanceId, ProviderKind>,
    /// Ids more than one member answered for.
    ambiguous: HashSet<InstanceId>,
}

fn refused(provider: ProviderKind, code: &str, message: String) -> CloudError {
    CloudError::Refused {
        provider,
        class: ErrorClass::InvalidRequest,
        code: code.to_string(),
        message,
    }
}

impl MultiCloud {
    /// A composite of `members`, one per kind; a second member of a kind is refused
    /// (`DuplicateProvider`).
    pub fn new(members: Vec<Arc<dyn CloudProvider>>) -> Result<MultiCloud, CloudError> {
        let mut by_kind = BTreeMap::new();
        for member in members {
            let kind = member.kind();
            if by_kind.insert(kind, member).is_some() {
                return Err(refused(
                    kind,
                    "DuplicateProvider",
                    format!("two {kind} providers in one composite; give each cloud one"),
                ));
            }
        }
        Ok(MultiCloud {
            members: by_kind,
            routes: Mutex::default(),
        })
    }

    /// The providers it routes between.
    pub fn members(&self) -> impl Iterator<Item = &Arc<dyn CloudProvider>> {
        self.members.values()
    }

    /// The same composite over `wrap(member)` for each member (the engine bounds and labels
    /// each cloud's calls apart), with what it has learned of the ids.
    pub fn map_members(
        &self,
        wrap: impl Fn(Arc<dyn CloudProvider>) -> Arc<dyn CloudProvider>,
    ) -> MultiCloud {
        let routes = self.routes();
        MultiCloud {
            members: self
                .members
                .iter()
                .map(|(kind, m)| (*kind, wrap(m.clone())))
                .collect(),
            routes: Mutex::new(Routes {
                owner: routes.owner.clone(),
                ambiguous: routes.ambiguous.clone(),
            }),
        }
    }

    fn routes(&self) -> MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn member(&self, kind: ProviderKind) -> Result<&Arc<dyn CloudProvider>, CloudError> {
        self.members.get(&kind).ok_or_else(|| {
            refused(
                kind,
                "NoProvider",
                format!(
                    "this deployment holds no {kind} provider; configure it to use {kind} offerings"
                ),
            )
        })
    }

    fn ambiguous(&self, id: &InstanceId) -> CloudError {
        refused(
            self.kind(),
            "AmbiguousInstanceId",
            format!(
                "instance {id} is claimed by more than one cloud; Headroom will not guess which to act on"
            ),
        )
    }

    /// The member that answers for `id` (see the module's routing rules).
    async fn owner_of(&self, id: &InstanceId) -> Result<ProviderKind, CloudError> {
        {
            let routes = self.routes();
            if routes.ambiguous.contains(id) {
                return Err(self.ambiguous(id));
            }
            if let Some(kind) = routes.owner.get(id) {
                return Ok(*kind);
            }
        }
        let mut found = Vec::new();
        let mut failure = None;
        for (kind, member) in &self.members {
            match member.describe(id).await {
                Ok(_) => found.push(*kind),
                Err(CloudError::NotFound(_)) => {}
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        let mut routes = self.routes();
        match (found.as_slice(), failure) {
            ([kind], None) => {
                routes.owner.insert(id.clone(), *kind);
                Ok(*kind)
            }
            ([], None) => Err(CloudError::NotFound(id.clone())),
            ([] | [_], Some(e)) => Err(e),
            _ => {
                routes.ambiguous.insert(id.clone());
                Err(self.ambiguous(id))
            }
        }
    }

    /// The members asked about `offerings`, each with its own.
    fn split(&self, offerings: &[Offering]) -> BTreeMap<ProviderKind, Vec<Offering>> {
        let mut by_kind: BTreeMap<ProviderKind, Vec<Offering>> = BTreeMap::new();
        for o in offerings {
            by_kind.entry(o.provider).or_default().push(o.clone());
        }
        by_kind
    }
}

#[async_trait]
impl CloudProvider for MultiCloud {
    /// The first member's kind. Nothing labels by it: the engine bounds and labels each member
    /// apart ([`CloudProvider::as_multi`]), and quotas by their offerings' provider.
    fn kind(&self) -> ProviderKind {
        self.members
            .keys()
            .next()
            .copied()
            .unwrap_or(ProviderKind::Sim)
    }

    fn as_multi(&self) -> Option<&MultiCloud> {
        Some(self)
    }

    async fn launch(&self, spec: &LaunchSpec) -> Result<Instance, CloudError> {
        let kind = spec.offering.provider;
        let instance = self.member(kind)?.launch(spec).await?;
        self.routes().owner.insert(instance.id.clone(), kind);
        Ok(instance)
    }

    async fn start(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let kind = self.owner_of(id).await?;
        self.member(kind)?.start(id).await
    }

    async fn stop(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let kind = self.owner_of(id).await?;
        self.member(kind)?.stop(id).await
    }

    async fn terminate(&self, id: &InstanceId) -> Result<(), CloudError> {
        let kind = self.owner_of(id).await?;
        self.member(kind)?.terminate(id).await
    }

    async fn describe(&self, id: &InstanceId) -> Result<Instance, CloudError> {
        let kind = self.owner_of(id).await?;
        self.member(kind)?.describe(id).await
    }

    /// Every member's inventory, merged. Any member's failure fails the whole read; the
    /// engine reads [`CloudProvider::list_owned_each`] instead.
    async fn list_owned(&self, cluster: &str) -> Result<Vec<Instance>, CloudError> {
        let mut all = Vec::new();
        for (_, answer) in self.list_owned_each(cluster).await {
            all.extend(answer?);
        }
        Ok(all)
    }

    /// Each member's inventory apart; the routes are rebuilt from them when every member
    /// answered, and only added to otherwise (what the others listed is still true).
    async fn list_owned_each(
        &self,
        cluster: &str,
    ) -> Vec<(ProviderKind, Result<Vec<Instance>, CloudError>)> {
        let mut answers = Vec::new();
        for (kind, member) in &self.members {
            answers.push((*kind, member.list_owned(cluster).await));
        }
        let mut owner: HashMap<InstanceId, ProviderKind> = HashMap::new();
        let mut ambiguous = HashSet::new();
        for (kind, answer) in &answers {
            for i in answer.iter().flatten() {
                if owner
                    .insert(i.id.clone(), *kind)
                    .is_some_and(|k| k != *kind)
                {
                    ambiguous.insert(i.id.clone());
                }
            }
        }
        let mut routes = self.routes();
        // Ids a member once claimed stay refused: a second claim is not forgotten by a read.
        ambiguous.extend(routes.ambiguous.drain());
        for id in &ambiguous {
            owner.remove(id);
        }
        if answers.iter().all(|(_, a)| a.is_ok()) {
            *routes = Routes { owner, ambiguous };
        } else {
            routes.owner.extend(owner);
            for id in &ambiguous {
                routes.owner.remove(id);
            }
            routes.ambiguous = ambiguous;
        }
        answers
    }

    async fn current_prices(
        &self,
        offerings: &[Offering],
    ) -> Result<Vec<(OfferingId, Money)>, CloudError> {
        let mut quotes = Vec::new();
        for (kind, asked) in self.split(offerings) {
            // Offerings of a cloud the deployment does not hold keep their configured price.
            let Some(member) = self.members.get(&kind) else {
                continue;
            };
            quotes.extend(member.current_prices(&asked).await?);
        }
        Ok(quotes)
    }

    /// Each member's quotas of `region` for its own offerings; a member that knows none leaves
    /// its offerings covered by no quota, as `Unknown` does.
    async fn quota_headroom(
        &self,
        region: &str,
        offerings: &[Offering],
    ) -> Result<Quotas, CloudError> {
        let mut known: Option<Vec<_>> = None;
        for (kind, asked) in self.split(offerings) {
            let Some(member) = self.members.get(&kind) else {
                continue;
            };
            if let Quotas::Known(quotas) = member.quota_headroom(region, &asked).await? {
                known.get_or_insert_with(Vec::new).extend(quotas);
            }
        }
        Ok(known.map_or(Quotas::Unknown, Quotas::Known))
    }
}
