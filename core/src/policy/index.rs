//! The policy index: client groups, policies and the matcher, compiled into what a core
//! consults per query, hung off the settings snapshot as one `Arc`.
//!
//! ```text
//! client address ─▶ group prefix table ┐
//! client ID ──────▶ group ID map ──────┴▶ group set ─▶ plan (dedup'd per group set):
//!                                                       roles per list, rewrites, response, TTL
//! query name ─▶ plan.rewrites ─▶ matcher.lookup(name, plan.roles) ─▶ Pass | Answer | Drop
//! ```
//! Schedules are resolved at build time: a policy outside its window is left out of every
//! plan, and [`BuildReport::next_change`] says when the control thread must build again.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::answer::CachedAnswer;
use crate::key::CacheKey;
use crate::wire::{Query, ReplyOptions};

use super::blocklist::Format;
use super::matcher::{ListId, Matcher};
use super::spec::{ClientGroupSpec, PolicySpec};

/// The built-in group of clients no other group holds.
pub const DEFAULT_GROUP: &str = "default";

/// One enabled client group, for [`PolicyIndex::build`].
#[derive(Debug, Clone, Copy)]
pub struct GroupSpec<'a> {
    /// Its object name.
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a ClientGroupSpec,
}

/// One enabled policy, for [`PolicyIndex::build`].
#[derive(Debug, Clone, Copy)]
pub struct PolicySource<'a> {
    /// Its object name.
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a PolicySpec,
}

/// What [`PolicyIndex::build`] compiles.
#[derive(Debug, Clone, Copy)]
pub struct BuildInputs<'a> {
    /// The compiled lists.
    pub matcher: &'a Arc<Matcher>,
    /// The loaded lists by name, with their slot in `matcher` and their format (to render
    /// the deciding rule in [`Explanation`]); a list not here is reported missing.
    pub lists: &'a HashMap<String, (ListId, Format)>,
    /// The enabled client groups.
    pub groups: &'a [GroupSpec<'a>],
    /// The enabled policies.
    pub policies: &'a [PolicySource<'a>],
    /// The instant schedules are resolved at.
    pub now: jiff::Timestamp,
    /// The TTL of block answers a policy does not set (`blocking.blockTTL`).
    pub block_ttl: Duration,
    /// The names under which a TLS SNI's first label is a client ID
    /// (`blocking.clientIdDomains`), lowercase wire.
    pub client_id_domains: &'a [Box<[u8]>],
    /// How many cores count blocks (per-core counters).
    pub cores: usize,
}

/// What [`PolicyIndex::build`] found besides the index.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BuildReport {
    /// Per policy (by name): references to groups or lists that do not exist or are not
    /// loaded, each as `("ClientGroup" | "BlockList", name)`.
    pub missing: HashMap<String, Vec<(&'static str, String)>>,
    /// Policies whose schedule leaves them out now.
    pub inactive: Vec<String>,
    /// When a schedule next changes which policies are in effect.
    pub next_change: Option<jiff::Timestamp>,
}

/// Who blocked a query, for metrics (`kudurru_blocked_total{policy,list}`) and the query log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    /// The deciding policy's position in [`PolicyIndex::policy_name`].
    pub policy: u16,
    /// The list whose rule decided, or `None` for a rewrite.
    pub list: Option<ListId>,
}

/// What the policy stage decided for one query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // returned by value on the stack: boxing would allocate per rewrite
pub enum PolicyDecision {
    /// No policy answers it: on to local names, the cache and upstream.
    Pass,
    /// A block answer or a rewrite is in `out`.
    Answer(Blocked),
    /// Send nothing (RPZ `rpz-drop.`).
    Drop(Blocked),
    /// A rewrite (or RPZ local data) to a CNAME: the shell resolves `target` as any query
    /// (cache, then upstream) and answers with the CNAME, TTL `ttl`, then the target's records
    /// ([`super::answer::write_chased`]), as AdGuard Home's rewrites and Unbound's
    /// `local-data` CNAMEs do: stub resolvers do not chase a CNAME themselves.
    Chase {
        /// The policy (and list, for RPZ) that decided.
        blocked: Blocked,
        /// The CNAME's target, with the query's type and class.
        target: CacheKey,
        /// The CNAME record's TTL.
        ttl: u32,
    },
}

/// The compiled groups, policies and lists one snapshot carries.
#[derive(Debug, Default)]
pub struct PolicyIndex {
    matcher: Arc<Matcher>,
    /// Policies in effect now (enabled, in their schedule window).
    in_effect: usize,
}

impl PolicyIndex {
    /// Compiles `inputs` into the index a snapshot carries, and what the build found.
    pub fn build(inputs: BuildInputs<'_>) -> (Self, BuildReport) {
        let _ = inputs;
        unimplemented!("PolicyIndex::build")
    }

    /// Whether no policy applies to anyone: the stage costs one branch.
    pub fn is_empty(&self) -> bool {
        self.in_effect == 0
    }

    /// The matcher it was built over.
    pub fn matcher(&self) -> &Arc<Matcher> {
        &self.matcher
    }

    /// The client ID carried by a TLS SNI under one of `blocking.clientIdDomains`
    /// (`kids.dns.example.net` → `kids`), lowercased into `buffer`.
    pub fn client_id_from_sni<'b>(&self, sni: &str, buffer: &'b mut [u8; 63]) -> Option<&'b str> {
        let _ = (sni, buffer);
        unimplemented!("PolicyIndex::client_id_from_sni")
    }

    /// The policy stage for `query` from `client` (address, and client ID on encrypted
    /// transports): a rewrite or a block answer written to `out`, a drop, or pass.
    pub fn decide(
        &self,
        query: &Query<'_>,
        client: IpAddr,
        client_id: Option<&str>,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> PolicyDecision {
        let _ = (query, client, client_id, options, out);
        unimplemented!("PolicyIndex::decide")
    }

    /// CNAME cloaking: whether `answer` (from the cache or upstream, for `query`) reaches a name
    /// this client's policies block through its CNAME chain; if so the block answer is in
    /// `out`. An answer without a CNAME costs one flag test.
    pub fn cloaked(
        &self,
        answer: &CachedAnswer,
        query: &Query<'_>,
        client: IpAddr,
        client_id: Option<&str>,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> PolicyDecision {
        let _ = (answer, query, client, client_id, options, out);
        unimplemented!("PolicyIndex::cloaked")
    }

    /// Counts a blocked query on `core` (per-core counters: no shared cache line).
    pub fn count(&self, core: usize, blocked: Blocked) {
        let _ = (core, blocked);
        unimplemented!("PolicyIndex::count")
    }

    /// The block counts summed over cores, as `(policy name, list name or "rewrite", count)`.
    pub fn counts(&self) -> Vec<(&str, &str, u64)> {
        unimplemented!("PolicyIndex::counts")
    }

    /// The name of policy `index`.
    pub fn policy_name(&self, index: u16) -> Option<&str> {
        let _ = index;
        unimplemented!("PolicyIndex::policy_name")
    }

    /// Why `qname` (lowercase wire) is or is not blocked for `client`: the groups, the policies
    /// in effect, the deciding policy, list and rule. For `GET /api/v1/blocking/check`.
    pub fn explain(&self, qname: &[u8], client: IpAddr, client_id: Option<&str>) -> Explanation {
        let _ = (qname, client, client_id);
        unimplemented!("PolicyIndex::explain")
    }
}

/// The answer to "why is this name blocked (or not) for this client".
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Explanation {
    /// The client's groups (`default` when in none).
    pub groups: Vec<String>,
    /// The policies in effect for them now.
    pub policies: Vec<String>,
    /// `"blocked"`, `"allowed"`, `"rewritten"` or `"none"` (no rule matched).
    pub verdict: &'static str,
    /// The deciding policy.
    pub policy: Option<String>,
    /// The deciding list.
    pub list: Option<String>,
    /// The deciding rule as the list's format writes it (`||ads.example.com^`).
    pub rule: Option<String>,
}
