//! The policy index: client groups, policies and the matcher, compiled into what a core
//! consults per query, hung off the settings snapshot as one `Arc`.
//!
//! ```text
//! client address ─▶ group prefix table ┐
//! client ID ──────▶ group ID map ──────┴▶ group set ─▶ plan (dedup'd per group set):
//!                                                       roles per list, rewrites, response, TTL
//! query name ─▶ plan.rewrites ─▶ matcher.lookup(name, plan.roles) ─▶ Pass | Answer | Drop
//! ```
//! Which groups a client is in: a client ID that some group lists decides alone (it names the
//! client more precisely than an address behind a NAT, as AdGuard Home's client IDs do);
//! otherwise the groups whose prefixes hold the address (all of them, not only the longest
//! prefix's); otherwise `default`. A client in a group that no policy names gets no policy.
//!
//! When several policies apply (through several groups), all their lists are consulted
//! together: an allow anywhere wins, else the most specific deny. Where they disagree, the
//! policy first by name decides: the rewrite of a name, and (for the list whose rule matched)
//! the block response, TTL and the policy counted. A list one policy allows and another denies
//! is an allow list for that client.
//!
//! Schedules are resolved at build time: a policy outside its window is left out of every
//! plan, and [`BuildReport::next_change`] says when the control thread must build again.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::answer::CachedAnswer;
use crate::key::CacheKey;
use crate::limiter::{address_bits, mask};
use crate::wire::{Query, ReplyOptions, class, rtype};

use super::answer;
use super::blocklist::{Action, Format, Scope};
use super::matcher::{Hit, ListId, Matcher, Role};
use super::name;
use super::spec::{BlockResponse, ClientGroupSpec, PolicySpec, RewriteTarget};

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
    /// Client groups past the limit of [`MAX_GROUPS`] in use (by name order): their clients
    /// get no policy.
    pub groups_over_limit: Vec<String>,
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

/// Most client groups a policy index tells apart, `default` included (a 64-bit set).
pub const MAX_GROUPS: usize = 64;

/// Counters on one cache line, so two cores never write the same line.
#[derive(Debug, Default)]
#[repr(align(64))]
struct CounterLine([AtomicU64; 8]);

/// One policy as the index keeps it.
#[derive(Debug)]
struct PolicyEntry {
    name: String,
    response: BlockResponse,
    ttl: u32,
    /// Its lists (deny, then allow), each a counter slot after `counter_base`; the rewrite
    /// slot follows them.
    lists: Vec<ListId>,
    counter_base: usize,
}

/// A rewrite in a plan: the name it answers, the policy it comes from, what it answers.
type PlanRewrite = (Box<[u8]>, u16, RewriteTarget);

/// What one set of groups gets: built once per distinct set.
#[derive(Debug, Default)]
struct Plan {
    /// The groups (bit 0: `default`).
    groups: u64,
    /// Active policies applying, first by name first.
    policies: Vec<u16>,
    /// How lookups use each list slot.
    roles: Box<[Role]>,
    /// Per list slot: the policy that decides a hit in it (first by name that names it).
    deciding: Box<[u16]>,
    /// Rewrites by name, sorted, each with the policy it comes from.
    rewrites: Box<[PlanRewrite]>,
}

/// The networks of one prefix length: a range of `PolicyIndex::prefixes`.
#[derive(Debug, Clone, Copy)]
struct Length {
    mask: u128,
    start: u32,
    end: u32,
}

/// The compiled groups, policies and lists one snapshot carries.
#[derive(Debug, Default)]
pub struct PolicyIndex {
    matcher: Arc<Matcher>,
    /// Policies in effect now (enabled, in their schedule window).
    in_effect: usize,
    /// Group names by bit (bit 0: `default`).
    groups: Vec<String>,
    /// Every client network (grouped by prefix length, longest first, sorted within a length)
    /// with the plan of the addresses whose longest match it is.
    prefixes: Box<[(u128, u16)]>,
    lengths: Box<[Length]>,
    /// Client IDs (lowercase) with their plan.
    ids: HashMap<Box<str>, u16>,
    /// The plan of clients in no group.
    default_plan: u16,
    plans: Vec<Plan>,
    /// Every enabled policy, by name.
    policies: Vec<PolicyEntry>,
    /// The loaded lists by slot, with their name and format.
    lists: Vec<(ListId, String, Format)>,
    client_id_domains: Vec<Box<[u8]>>,
    /// Per core: the block counters.
    counters: Box<[Box<[CounterLine]>]>,
}

/// A TTL as a record carries it (RFC 2181 §8: at most 2^31 - 1).
fn ttl_secs(ttl: Duration) -> u32 {
    u32::try_from(ttl.as_secs())
        .unwrap_or(u32::MAX)
        .min(i32::MAX as u32)
}

impl PolicyIndex {
    /// Compiles `inputs` into the index a snapshot carries, and what the build found.
    pub fn build(inputs: BuildInputs<'_>) -> (Self, BuildReport) {
        let mut report = BuildReport::default();
        let mut order: Vec<&PolicySource<'_>> = inputs.policies.iter().collect();
        order.sort_by(|a, b| a.name.cmp(b.name));
        order.dedup_by(|a, b| a.name == b.name);
        order.truncate(usize::from(u16::MAX));
        let group_names: HashMap<&str, &GroupSpec<'_>> =
            inputs.groups.iter().map(|g| (g.name, g)).collect();

        // Policies: what they reference, whether they are in effect now.
        let mut policies = Vec::with_capacity(order.len());
        let mut active = Vec::with_capacity(order.len());
        let mut counter_slots = 0;
        for source in &order {
            let spec = source.spec;
            let mut missing = Vec::new();
            for group in &spec.client_groups {
                if group != DEFAULT_GROUP && !group_names.contains_key(group.as_str()) {
                    missing.push(("ClientGroup", group.clone()));
                }
            }
            let mut lists = Vec::new();
            for list in spec.deny_lists.iter().chain(&spec.allow_lists) {
                match inputs.lists.get(list) {
                    Some((id, _)) => {
                        if !lists.contains(id) {
                            lists.push(*id);
                        }
                    }
                    None => missing.push(("BlockList", list.clone())),
                }
            }
            if !missing.is_empty() {
                report.missing.insert(source.name.to_owned(), missing);
            }
            let in_window = match &spec.schedule {
                None => true,
                Some(schedule) => {
                    if let Some(change) = schedule.next_change(inputs.now) {
                        report.next_change =
                            Some(report.next_change.map_or(change, |c| c.min(change)));
                    }
                    schedule.active_at(inputs.now)
                }
            };
            if !in_window {
                report.inactive.push(source.name.to_owned());
            }
            active.push(in_window);
            policies.push(PolicyEntry {
                name: source.name.to_owned(),
                response: spec.block_response.clone(),
                ttl: ttl_secs(spec.block_ttl.unwrap_or(inputs.block_ttl)),
                counter_base: counter_slots,
                lists,
            });
            counter_slots += policies.last().map_or(0, |p| p.lists.len() + 1);
        }

        // Group bits: `default` is bit 0; the groups active policies name get the others, by
        // name, as long as bits last.
        let mut named: Vec<&str> = order
            .iter()
            .zip(&active)
            .filter(|(_, active)| **active)
            .flat_map(|(p, _)| p.spec.client_groups.iter().map(String::as_str))
            .filter(|g| *g != DEFAULT_GROUP && group_names.contains_key(g))
            .collect();
        named.sort_unstable();
        named.dedup();
        let mut groups = vec![DEFAULT_GROUP.to_owned()];
        for name in named {
            if groups.len() < MAX_GROUPS {
                groups.push(name.to_owned());
            } else {
                report.groups_over_limit.push(name.to_owned());
            }
        }
        let bit_of = |name: &str| -> u64 {
            groups
                .iter()
                .position(|g| g == name)
                .map_or(0, |i| 1u64 << i)
        };

        let mut plans: Vec<Plan> = Vec::new();
        let mut plan_of: HashMap<u64, u16> = HashMap::new();
        let mut plan_for = |mask: u64, plans: &mut Vec<Plan>| -> u16 {
            *plan_of.entry(mask).or_insert_with(|| {
                plans.push(build_plan(mask, &order, &active, &groups, inputs.lists));
                (plans.len() - 1) as u16
            })
        };
        let default_plan = plan_for(1, &mut plans);

        // Prefixes: every group's networks; an address gets the groups of every network that
        // holds it, so each network inherits the groups of the shorter ones around it.
        let mut networks: Vec<(u8, u128, u64)> = Vec::new();
        for group in inputs.groups {
            let bit = bit_of(group.name);
            for prefix in &group.spec.clients {
                networks.push((prefix.length(), prefix.network_bits(), bit));
            }
        }
        networks.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut merged: Vec<(u8, u128, u64)> = Vec::with_capacity(networks.len());
        for (len, bits, mask) in networks {
            match merged.last_mut() {
                Some(last) if last.0 == len && last.1 == bits => last.2 |= mask,
                _ => merged.push((len, bits, mask)),
            }
        }
        let mut lengths: Vec<Length> = Vec::new();
        for (i, &(len, _, _)) in merged.iter().enumerate() {
            let mask = mask(len);
            match lengths.last_mut() {
                Some(last) if last.mask == mask => last.end = i as u32 + 1,
                _ => lengths.push(Length {
                    mask,
                    start: i as u32,
                    end: i as u32 + 1,
                }),
            }
        }
        let inherited: Vec<u64> = merged
            .iter()
            .map(|&(len, bits, own)| {
                let mut groups = own;
                for shorter in lengths.iter().filter(|l| mask(len) & l.mask == l.mask) {
                    let range = &merged[shorter.start as usize..shorter.end as usize];
                    if let Ok(i) = range.binary_search_by(|e| e.1.cmp(&(bits & shorter.mask))) {
                        groups |= range[i].2;
                    }
                }
                groups
            })
            .collect();
        let prefixes: Box<[(u128, u16)]> = merged
            .iter()
            .zip(inherited)
            .map(|(&(_, bits, _), mask)| (bits, plan_for(mask, &mut plans)))
            .collect();

        // Client IDs.
        let mut id_masks: HashMap<String, u64> = HashMap::new();
        for group in inputs.groups {
            let bit = bit_of(group.name);
            for id in &group.spec.client_ids {
                *id_masks.entry(id.to_ascii_lowercase()).or_default() |= bit;
            }
        }
        let ids = id_masks
            .into_iter()
            .map(|(id, mask)| (id.into_boxed_str(), plan_for(mask, &mut plans)))
            .collect();

        let mut lists: Vec<(ListId, String, Format)> = inputs
            .lists
            .iter()
            .map(|(name, (id, format))| (*id, name.clone(), *format))
            .collect();
        lists.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let cores = inputs.cores.max(1);
        let counters = (0..cores)
            .map(|_| {
                (0..counter_slots.div_ceil(8))
                    .map(|_| CounterLine::default())
                    .collect()
            })
            .collect();
        let index = Self {
            matcher: Arc::clone(inputs.matcher),
            in_effect: active.iter().filter(|a| **a).count(),
            groups,
            prefixes,
            lengths: lengths.into(),
            ids,
            default_plan,
            plans,
            policies,
            lists,
            client_id_domains: inputs.client_id_domains.to_vec(),
            counters,
        };
        (index, report)
    }

    /// Whether no policy applies to anyone: the stage costs one branch.
    pub fn is_empty(&self) -> bool {
        self.in_effect == 0
    }

    /// The matcher it was built over.
    pub fn matcher(&self) -> &Arc<Matcher> {
        &self.matcher
    }

    /// The plan of `client`: by client ID first, then by address, else `default`.
    fn plan(&self, client: IpAddr, client_id: Option<&str>) -> Option<&Plan> {
        if let Some(id) = client_id.filter(|_| !self.ids.is_empty()) {
            if let Some(&plan) = self.ids.get(id) {
                return self.plans.get(usize::from(plan));
            }
            let mut lower = [0u8; 64];
            if id.len() <= lower.len() && id.bytes().any(|b| b.is_ascii_uppercase()) {
                let lower = &mut lower[..id.len()];
                lower.copy_from_slice(id.as_bytes());
                lower.make_ascii_lowercase();
                if let Some(&plan) = std::str::from_utf8(lower)
                    .ok()
                    .and_then(|l| self.ids.get(l))
                {
                    return self.plans.get(usize::from(plan));
                }
            }
        }
        let bits = address_bits(client);
        for group in self.lengths.iter() {
            let networks = &self.prefixes[group.start as usize..group.end as usize];
            let network = bits & group.mask;
            if let Ok(i) = networks.binary_search_by(|e| e.0.cmp(&network)) {
                return self.plans.get(usize::from(networks[i].1));
            }
        }
        self.plans.get(usize::from(self.default_plan))
    }

    /// The client ID carried by a TLS SNI under one of `blocking.clientIdDomains`
    /// (`kids.dns.example.net` → `kids`), lowercased into `buffer`.
    pub fn client_id_from_sni<'b>(&self, sni: &str, buffer: &'b mut [u8; 63]) -> Option<&'b str> {
        let sni = sni.strip_suffix('.').unwrap_or(sni);
        let (first, rest) = sni.split_once('.')?;
        if first.is_empty()
            || first.len() > buffer.len()
            || !first
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return None;
        }
        if !self
            .client_id_domains
            .iter()
            .any(|domain| text_equals_wire(rest, domain))
        {
            return None;
        }
        let out = &mut buffer[..first.len()];
        out.copy_from_slice(first.as_bytes());
        out.make_ascii_lowercase();
        std::str::from_utf8(out).ok()
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
        if query.qclass() != class::IN {
            return PolicyDecision::Pass;
        }
        let Some(plan) = self.plan(client, client_id) else {
            return PolicyDecision::Pass;
        };
        if plan.policies.is_empty() {
            return PolicyDecision::Pass;
        }
        let qname = query.key().qname();
        if let Ok(i) = plan.rewrites.binary_search_by(|r| (*r.0).cmp(qname)) {
            let (_, policy, target) = &plan.rewrites[i];
            return self.rewrite(*policy, target, query, options, out);
        }
        match self.matcher.lookup(qname, &plan.roles) {
            None => PolicyDecision::Pass,
            Some(hit) => self.act(plan, &hit, query, options, out),
        }
    }

    /// Answers a rewrite.
    fn rewrite(
        &self,
        policy: u16,
        target: &RewriteTarget,
        query: &Query<'_>,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> PolicyDecision {
        let blocked = Blocked { policy, list: None };
        let ttl = self.policies.get(usize::from(policy)).map_or(0, |p| p.ttl);
        match target {
            RewriteTarget::Addresses(addresses) => {
                answer::write_addresses(query, addresses, ttl, options, out);
                PolicyDecision::Answer(blocked)
            }
            RewriteTarget::Cname(target) => self.chase(blocked, target, ttl, query, options, out),
        }
    }

    /// A CNAME to `target`: answered alone for a CNAME query, chased otherwise.
    fn chase(
        &self,
        blocked: Blocked,
        target: &[u8],
        ttl: u32,
        query: &Query<'_>,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> PolicyDecision {
        let key = query.key();
        match CacheKey::new(
            target,
            query.qtype(),
            query.qclass(),
            key.dnssec_ok(),
            key.checking_disabled(),
        ) {
            Some(target) if query.qtype() != rtype::CNAME => PolicyDecision::Chase {
                blocked,
                target,
                ttl,
            },
            _ => {
                answer::write_cname(query, target, ttl, options, out);
                PolicyDecision::Answer(blocked)
            }
        }
    }

    /// What a matching rule does to `query`.
    fn act(
        &self,
        plan: &Plan,
        hit: &Hit,
        query: &Query<'_>,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> PolicyDecision {
        if hit.action == Action::Allow {
            return PolicyDecision::Pass;
        }
        let Some(&policy) = plan.deciding.get(usize::from(hit.list.0)) else {
            return PolicyDecision::Pass;
        };
        let Some(entry) = self.policies.get(usize::from(policy)) else {
            return PolicyDecision::Pass;
        };
        let blocked = Blocked {
            policy,
            list: Some(hit.list),
        };
        let response = match hit.action {
            Action::Deny => &entry.response,
            Action::Nodata => &BlockResponse::Nodata,
            Action::Drop => return PolicyDecision::Drop(blocked),
            Action::LocalData(_) => match self.matcher.local_data(hit) {
                Some(data) => {
                    let cname = data.records.iter().find(|(t, _)| *t == rtype::CNAME);
                    if let Some((_, target)) = cname {
                        return self.chase(blocked, target, entry.ttl, query, options, out);
                    }
                    answer::write_local_data(query, data, entry.ttl, options, out);
                    return PolicyDecision::Answer(blocked);
                }
                None => &BlockResponse::Nxdomain,
            },
            Action::Nxdomain | Action::Allow => &BlockResponse::Nxdomain,
        };
        answer::write_block(query, response, entry.ttl, options, out);
        PolicyDecision::Answer(blocked)
    }

    /// CNAME cloaking: whether `answer` (from the cache or upstream, for `query`) reaches a name
    /// this client's policies block through its CNAME chain; if so the block answer is in
    /// `out`. An answer without a CNAME costs one flag test.
    ///
    /// A query name the client's lists allow is never blocked through its CNAMEs. A blocked
    /// target gets the deciding policy's block response (an RPZ NXDOMAIN, NODATA or drop rule
    /// acts as written; RPZ local data on a target blocks with the policy's response).
    pub fn cloaked(
        &self,
        answer: &CachedAnswer,
        query: &Query<'_>,
        client: IpAddr,
        client_id: Option<&str>,
        options: &ReplyOptions,
        out: &mut Vec<u8>,
    ) -> PolicyDecision {
        if !answer.has_cname() || self.is_empty() || query.qclass() != class::IN {
            return PolicyDecision::Pass;
        }
        let Some(plan) = self.plan(client, client_id) else {
            return PolicyDecision::Pass;
        };
        if plan.policies.is_empty() {
            return PolicyDecision::Pass;
        }
        let qname = query.key().qname();
        if self
            .matcher
            .lookup(qname, &plan.roles)
            .is_some_and(|hit| hit.action == Action::Allow)
        {
            return PolicyDecision::Pass;
        }
        let mut blocked_by = None;
        answer.any_cname_target(|target| match self.matcher.lookup(target, &plan.roles) {
            Some(hit) if hit.action != Action::Allow => {
                blocked_by = Some(hit);
                true
            }
            _ => false,
        });
        let Some(mut hit) = blocked_by else {
            return PolicyDecision::Pass;
        };
        if matches!(hit.action, Action::LocalData(_)) {
            hit.action = Action::Deny;
        }
        self.act(plan, &hit, query, options, out)
    }

    /// Counts a blocked query on `core` (per-core counters: no shared cache line).
    pub fn count(&self, core: usize, blocked: Blocked) {
        let Some(last) = self.counters.len().checked_sub(1) else {
            return;
        };
        let Some(policy) = self.policies.get(usize::from(blocked.policy)) else {
            return;
        };
        let offset = match blocked.list {
            None => policy.lists.len(),
            Some(list) => match policy.lists.iter().position(|l| *l == list) {
                Some(at) => at,
                None => return,
            },
        };
        let slot = policy.counter_base + offset;
        if let Some(line) = self.counters[core.min(last)].get(slot / 8) {
            line.0[slot % 8].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The block counts summed over cores, as `(policy name, list name or "rewrite", count)`.
    pub fn counts(&self) -> Vec<(&str, &str, u64)> {
        let sum = |slot: usize| -> u64 {
            self.counters
                .iter()
                .filter_map(|core| core.get(slot / 8))
                .map(|line| line.0[slot % 8].load(Ordering::Relaxed))
                .sum()
        };
        let mut out = Vec::new();
        for policy in &self.policies {
            for (offset, list) in policy.lists.iter().enumerate() {
                let name = self.list_name(*list).unwrap_or("?");
                out.push((
                    policy.name.as_str(),
                    name,
                    sum(policy.counter_base + offset),
                ));
            }
            let rewrites = sum(policy.counter_base + policy.lists.len());
            out.push((policy.name.as_str(), "rewrite", rewrites));
        }
        out
    }

    /// The name of policy `index`.
    pub fn policy_name(&self, index: u16) -> Option<&str> {
        self.policies
            .get(usize::from(index))
            .map(|p| p.name.as_str())
    }

    /// The name of the list in slot `list`.
    pub fn list_name(&self, list: ListId) -> Option<&str> {
        self.list_entry(list).map(|(_, name, _)| name.as_str())
    }

    fn list_entry(&self, list: ListId) -> Option<&(ListId, String, Format)> {
        let at = self.lists.binary_search_by_key(&list, |e| e.0).ok()?;
        self.lists.get(at)
    }

    /// Why `qname` (lowercase wire) is or is not blocked for `client`: the groups, the policies
    /// in effect, the deciding policy, list and rule. For `GET /api/v1/blocking/check`.
    pub fn explain(&self, qname: &[u8], client: IpAddr, client_id: Option<&str>) -> Explanation {
        let mut explanation = Explanation {
            verdict: "none",
            ..Explanation::default()
        };
        let Some(plan) = self.plan(client, client_id) else {
            // No index built yet, or no group: every client is in the built-in group alone.
            explanation.groups = vec![DEFAULT_GROUP.to_owned()];
            return explanation;
        };
        explanation.groups = self
            .groups
            .iter()
            .enumerate()
            .filter(|(bit, _)| plan.groups & (1u64 << bit) != 0)
            .map(|(_, name)| name.clone())
            .collect();
        explanation.policies = plan
            .policies
            .iter()
            .filter_map(|p| self.policy_name(*p).map(str::to_owned))
            .collect();
        if plan.policies.is_empty() {
            return explanation;
        }
        if let Ok(i) = plan.rewrites.binary_search_by(|r| (*r.0).cmp(qname)) {
            let (name, policy, target) = &plan.rewrites[i];
            explanation.verdict = "rewritten";
            explanation.policy = self.policy_name(*policy).map(str::to_owned);
            explanation.rule = Some(match target {
                RewriteTarget::Addresses(a) => format!(
                    "{} → {}",
                    name::to_text(name),
                    a.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                RewriteTarget::Cname(t) => {
                    format!("{} CNAME {}.", name::to_text(name), name::to_text(t))
                }
            });
            return explanation;
        }
        let Some(hit) = self.matcher.lookup(qname, &plan.roles) else {
            return explanation;
        };
        explanation.verdict = if hit.action == Action::Allow {
            "allowed"
        } else {
            "blocked"
        };
        explanation.policy = plan
            .deciding
            .get(usize::from(hit.list.0))
            .and_then(|p| self.policy_name(*p))
            .map(str::to_owned);
        let entry = self.list_entry(hit.list);
        explanation.list = entry.map(|(_, name, _)| name.clone());
        let format = entry.map_or(Format::Auto, |e| e.2);
        let role = plan
            .roles
            .get(usize::from(hit.list.0))
            .copied()
            .unwrap_or_default();
        let rule_name = name::to_text(qname.get(hit.suffix_at..).unwrap_or_default());
        explanation.rule = Some(render_rule(format, role, &hit, &rule_name));
        explanation
    }
}

/// The rule of `hit` as its list's format writes it.
fn render_rule(format: Format, role: Role, hit: &Hit, name: &str) -> String {
    let exception = hit.action == Action::Allow && role == Role::Deny;
    match format {
        Format::Hosts | Format::Domains => name.to_owned(),
        Format::Adblock => {
            let at = if exception { "@@" } else { "" };
            match hit.scope {
                Scope::Exact => format!("{at}|{name}^"),
                Scope::Subtree | Scope::Below => format!("{at}||{name}^"),
            }
        }
        Format::Wildcard => format!("*.{name}"),
        Format::Rpz => {
            let owner = match hit.scope {
                Scope::Below => format!("*.{name}"),
                _ => name.to_owned(),
            };
            let action = match hit.action {
                Action::Nxdomain | Action::Deny => "CNAME .",
                Action::Nodata => "CNAME *.",
                Action::Allow => "CNAME rpz-passthru.",
                Action::Drop => "CNAME rpz-drop.",
                Action::LocalData(_) => "(local data)",
            };
            format!("{owner} {action}")
        }
        Format::Auto => match hit.scope {
            Scope::Exact => name.to_owned(),
            Scope::Subtree | Scope::Below => format!("*.{name}"),
        },
    }
}

/// Whether the presentation name `text` (no trailing dot) is the wire name `wire`, ignoring
/// ASCII case.
fn text_equals_wire(text: &str, wire: &[u8]) -> bool {
    let mut pos = 0;
    for label in text.split('.') {
        let Some(&len) = wire.get(pos) else {
            return false;
        };
        let len = usize::from(len);
        if len == 0 || len != label.len() {
            return false;
        }
        let Some(wire_label) = wire.get(pos + 1..pos + 1 + len) else {
            return false;
        };
        if !wire_label.eq_ignore_ascii_case(label.as_bytes()) {
            return false;
        }
        pos += 1 + len;
    }
    wire.get(pos) == Some(&0) && pos + 1 == wire.len()
}

/// The plan of the group set `mask`: the active policies naming one of its groups.
fn build_plan(
    mask: u64,
    order: &[&PolicySource<'_>],
    active: &[bool],
    groups: &[String],
    lists: &HashMap<String, (ListId, Format)>,
) -> Plan {
    let mut plan = Plan {
        groups: mask,
        ..Plan::default()
    };
    let mut roles: Vec<Role> = Vec::new();
    let mut deciding: Vec<u16> = Vec::new();
    let mut rewrites: Vec<PlanRewrite> = Vec::new();
    for (index, source) in order.iter().enumerate() {
        if !active[index] {
            continue;
        }
        let applies = source.spec.client_groups.iter().any(|g| {
            groups
                .iter()
                .position(|name| name == g)
                .is_some_and(|bit| mask & (1u64 << bit) != 0)
        });
        if !applies {
            continue;
        }
        let index = index as u16;
        plan.policies.push(index);
        let uses = source
            .spec
            .deny_lists
            .iter()
            .map(|l| (l, Role::Deny))
            .chain(source.spec.allow_lists.iter().map(|l| (l, Role::Allow)));
        for (list, role) in uses {
            let Some((id, _)) = lists.get(list) else {
                continue;
            };
            let slot = usize::from(id.0);
            if slot >= super::matcher::MAX_LISTS {
                continue;
            }
            if roles.len() <= slot {
                roles.resize(slot + 1, Role::Unused);
                deciding.resize(slot + 1, u16::MAX);
            }
            if roles[slot] != Role::Allow {
                roles[slot] = role;
            }
            if deciding[slot] == u16::MAX {
                deciding[slot] = index;
            }
        }
        for rewrite in &source.spec.rewrites {
            rewrites.push((rewrite.name.clone(), index, rewrite.target.clone()));
        }
    }
    // Stable: for one name, the policy first by name stays first and wins.
    rewrites.sort_by(|a, b| a.0.cmp(&b.0));
    rewrites.dedup_by(|later, first| later.0 == first.0);
    plan.roles = roles.into();
    plan.deciding = deciding.into();
    plan.rewrites = rewrites.into();
    plan
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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use domain::base::Message;

    use super::*;
    use crate::answer::TtlPolicy;
    use crate::policy::blocklist::{self, Format};
    use crate::policy::matcher::ListMode;
    use crate::policy::schedule::{Schedule, Window};
    use crate::policy::spec::Rewrite;
    use crate::wire::{self, rcode};

    const UDP: ReplyOptions = ReplyOptions {
        payload: 1232,
        tcp_keepalive: None,
        padding: false,
    };

    fn policy(groups: &[&str], deny: &[&str], allow: &[&str]) -> PolicySpec {
        PolicySpec {
            client_groups: groups.iter().map(|s| s.to_string()).collect(),
            deny_lists: deny.iter().map(|s| s.to_string()).collect(),
            allow_lists: allow.iter().map(|s| s.to_string()).collect(),
            block_response: BlockResponse::Nxdomain,
            block_ttl: None,
            rewrites: Vec::new(),
            schedule: None,
        }
    }

    /// Lists: `ads` (adblock, slot 0), `kids` (domains, slot 1), `allow` (domains allow-mode,
    /// slot 2), `rpz` (slot 3).
    fn matcher() -> (Arc<Matcher>, HashMap<String, (ListId, Format)>) {
        let lists: [(&str, u16, Format, ListMode, &str); 4] = [
            (
                "ads",
                0,
                Format::Adblock,
                ListMode::Deny,
                "||ads.example^\n@@||ok.ads.example^\n",
            ),
            (
                "kids",
                1,
                Format::Domains,
                ListMode::Deny,
                "games.example\ncloaked-tracker.example\n",
            ),
            (
                "allow",
                2,
                Format::Domains,
                ListMode::Allow,
                "fine.ads.example\n",
            ),
            (
                "rpz",
                3,
                Format::Rpz,
                ListMode::Deny,
                "$ORIGIN rpz.\n*.malware.example CNAME .\nsink.example A 192.0.2.99\ndrop.example CNAME rpz-drop.\nsafe.example CNAME forcesafe.example.net.\n",
            ),
        ];
        let mut m = Matcher::new(42);
        let mut names = HashMap::new();
        for (name, slot, format, mode, body) in lists {
            let parsed = blocklist::parse(body.as_bytes(), format, usize::MAX);
            m = m.with_list(ListId(slot), mode, &parsed);
            names.insert(name.to_owned(), (ListId(slot), format));
        }
        (Arc::new(m), names)
    }

    struct World {
        index: PolicyIndex,
        report: BuildReport,
    }

    fn world(now: &str) -> World {
        let (matcher, lists) = matcher();
        let kids = ClientGroupSpec {
            clients: vec![
                "192.0.2.0/24".parse().unwrap(),
                "2001:db8:1::/48".parse().unwrap(),
            ],
            client_ids: vec!["Kids-Tablet".into()],
            ..Default::default()
        };
        let office = ClientGroupSpec {
            clients: vec![
                "198.51.100.0/24".parse().unwrap(),
                "198.51.100.128/25".parse().unwrap(),
            ],
            client_ids: vec![],
            ..Default::default()
        };
        let lab = ClientGroupSpec {
            clients: vec!["198.51.100.200/32".parse().unwrap()],
            client_ids: vec![],
            ..Default::default()
        };
        let groups = [
            GroupSpec {
                name: "kids",
                spec: &kids,
            },
            GroupSpec {
                name: "office",
                spec: &office,
            },
            GroupSpec {
                name: "lab",
                spec: &lab,
            },
        ];
        let base = PolicySpec {
            rewrites: vec![
                Rewrite::new(
                    "nas.home",
                    RewriteTarget::Addresses(vec!["192.0.2.5".parse().unwrap()]),
                )
                .unwrap(),
                Rewrite::new(
                    "www.search.example",
                    RewriteTarget::cname("forcesafe.example.net").unwrap(),
                )
                .unwrap(),
            ],
            ..policy(
                &["default", "kids", "office"],
                &["ads", "rpz", "missing-list"],
                &["allow"],
            )
        };
        let kids_policy = PolicySpec {
            block_response: BlockResponse::Null,
            block_ttl: Some(Duration::from_secs(5)),
            rewrites: vec![
                Rewrite::new(
                    "nas.home",
                    RewriteTarget::Addresses(vec!["192.0.2.6".parse().unwrap()]),
                )
                .unwrap(),
            ],
            ..policy(&["kids", "no-such-group"], &["kids"], &[])
        };
        // Office hours only (UTC).
        let office_policy = PolicySpec {
            schedule: Some(
                Schedule::new(
                    "UTC",
                    vec![
                        Window::parse(&["mon", "tue", "wed", "thu", "fri"], "09:00", "17:00")
                            .unwrap(),
                    ],
                )
                .unwrap(),
            ),
            ..policy(&["lab"], &["kids"], &[])
        };
        let policies = [
            PolicySource {
                name: "kids",
                spec: &kids_policy,
            },
            PolicySource {
                name: "base",
                spec: &base,
            },
            PolicySource {
                name: "office-hours",
                spec: &office_policy,
            },
        ];
        let domains = [b"\x03dns\x07example\x03net\x00".to_vec().into_boxed_slice()];
        let (index, report) = PolicyIndex::build(BuildInputs {
            matcher: &matcher,
            lists: &lists,
            groups: &groups,
            policies: &policies,
            now: now.parse().unwrap(),
            block_ttl: Duration::from_secs(3600),
            client_id_domains: &domains,
            cores: 2,
        });
        World { index, report }
    }

    const SATURDAY: &str = "2026-01-17T12:00:00Z";
    const MONDAY: &str = "2026-01-19T12:00:00Z";

    fn decide(
        index: &PolicyIndex,
        name: &str,
        qtype: u16,
        client: &str,
        id: Option<&str>,
    ) -> (PolicyDecision, Vec<u8>) {
        let m = wire::tests::query(name, qtype, Some((1232, 0, false)));
        let q = Query::parse(&m).unwrap();
        let mut out = Vec::new();
        let decision = index.decide(&q, client.parse().unwrap(), id, &UDP, &mut out);
        (decision, out)
    }

    fn blocked_by(index: &PolicyIndex, decision: PolicyDecision) -> Option<(&str, Option<&str>)> {
        match decision {
            PolicyDecision::Answer(b)
            | PolicyDecision::Drop(b)
            | PolicyDecision::Chase { blocked: b, .. } => Some((
                index.policy_name(b.policy).unwrap(),
                b.list.map(|l| index.list_name(l).unwrap()),
            )),
            PolicyDecision::Pass => None,
        }
    }

    #[test]
    fn the_build_reports_missing_references_schedules_and_the_next_change() {
        let World { index, report } = world(SATURDAY);
        assert!(!index.is_empty());
        assert_eq!(
            report.missing.get("base"),
            Some(&vec![("BlockList", "missing-list".to_owned())])
        );
        assert_eq!(
            report.missing.get("kids"),
            Some(&vec![("ClientGroup", "no-such-group".to_owned())])
        );
        assert_eq!(report.inactive, vec!["office-hours".to_owned()]);
        assert_eq!(
            report.next_change,
            Some("2026-01-19T09:00:00Z".parse().unwrap())
        );
        assert!(report.groups_over_limit.is_empty());
        let World { report, .. } = world(MONDAY);
        assert!(report.inactive.is_empty());
        assert_eq!(
            report.next_change,
            Some("2026-01-19T17:00:00Z".parse().unwrap())
        );
    }

    #[test]
    fn groups_by_prefix_by_client_id_and_the_default_group_get_their_policies() {
        let World { index, .. } = world(SATURDAY);
        let i = &index;
        // Default (no group): base only.
        let (d, out) = decide(i, "x.ads.example", rtype::A, "203.0.113.9", None);
        assert_eq!(blocked_by(i, d), Some(("base", Some("ads"))));
        assert_eq!(wire::header_rcode(&out), Some(rcode::NXDOMAIN));
        assert_eq!(
            blocked_by(i, decide(i, "games.example", 1, "203.0.113.9", None).0),
            None
        );
        // Kids by prefix (IPv4 and IPv6): kids' list too, with its null response and TTL.
        let (d, out) = decide(i, "games.example", 1, "192.0.2.77", None);
        assert_eq!(blocked_by(i, d), Some(("kids", Some("kids"))));
        let msg = Message::from_slice(&out).unwrap();
        let a = msg.answer().unwrap().next().unwrap().unwrap();
        let a = a.into_record::<domain::rdata::A>().unwrap().unwrap();
        assert_eq!(
            (a.ttl().as_secs(), a.data().to_string()),
            (5, "0.0.0.0".to_owned())
        );
        assert_eq!(
            blocked_by(i, decide(i, "games.example", 1, "2001:db8:1::9", None).0),
            Some(("kids", Some("kids")))
        );
        // Kids by client ID (any case) from an address in no group.
        assert_eq!(
            blocked_by(
                i,
                decide(i, "games.example", 1, "203.0.113.9", Some("kids-tablet")).0
            ),
            Some(("kids", Some("kids")))
        );
        assert_eq!(
            blocked_by(
                i,
                decide(i, "games.example", 1, "203.0.113.9", Some("KIDS-TABLET")).0
            ),
            Some(("kids", Some("kids")))
        );
        // An unknown client ID falls back to the address.
        assert_eq!(
            blocked_by(
                i,
                decide(i, "games.example", 1, "192.0.2.1", Some("other")).0
            ),
            Some(("kids", Some("kids")))
        );
        // The lab is in office (the /24 and /25 around it) and in lab: base applies through
        // office; office-hours is out of its window on Saturday.
        assert_eq!(
            blocked_by(i, decide(i, "games.example", 1, "198.51.100.200", None).0),
            None
        );
        assert_eq!(
            blocked_by(i, decide(i, "x.ads.example", 1, "198.51.100.200", None).0),
            Some(("base", Some("ads")))
        );
        let World { index, .. } = world(MONDAY);
        assert_eq!(
            blocked_by(
                &index,
                decide(&index, "games.example", 1, "198.51.100.200", None).0
            ),
            Some(("office-hours", Some("kids")))
        );
        assert_eq!(
            blocked_by(
                &index,
                decide(&index, "games.example", 1, "198.51.100.7", None).0
            ),
            None
        );
    }

    #[test]
    fn allows_rewrites_and_rpz_actions() {
        let World { index, .. } = world(SATURDAY);
        let i = &index;
        let client = "203.0.113.1";
        // @@ exception and the allow-mode list.
        assert_eq!(
            decide(i, "ok.ads.example", 1, client, None).0,
            PolicyDecision::Pass
        );
        assert_eq!(
            decide(i, "fine.ads.example", 1, client, None).0,
            PolicyDecision::Pass
        );
        // CH queries are never blocked.
        let mut m = wire::tests::query("x.ads.example", 1, None);
        let at = m.len() - 2;
        m[at..].copy_from_slice(&3u16.to_be_bytes());
        let q = Query::parse(&m).unwrap();
        assert_eq!(
            i.decide(&q, client.parse().unwrap(), None, &UDP, &mut Vec::new()),
            PolicyDecision::Pass
        );
        // RPZ: Below, drop, local data, CNAME local data chased.
        assert_eq!(
            blocked_by(i, decide(i, "malware.example", 1, client, None).0),
            None
        );
        let (d, out) = decide(i, "a.malware.example", 1, client, None);
        assert_eq!(blocked_by(i, d), Some(("base", Some("rpz"))));
        assert_eq!(wire::header_rcode(&out), Some(rcode::NXDOMAIN));
        assert!(matches!(
            decide(i, "drop.example", 1, client, None).0,
            PolicyDecision::Drop(_)
        ));
        let (d, out) = decide(i, "sink.example", 1, client, None);
        assert!(matches!(d, PolicyDecision::Answer(_)));
        assert!(out.windows(4).any(|w| w == [192, 0, 2, 99]));
        match decide(i, "safe.example", 28, client, None).0 {
            PolicyDecision::Chase { target, ttl, .. } => {
                assert_eq!(target.qname(), b"\x09forcesafe\x07example\x03net\x00");
                assert_eq!(target.qtype(), 28);
                assert_eq!(ttl, 3600);
            }
            other => panic!("{other:?}"),
        }
        // Rewrites: the policy first by name wins (base before kids).
        let (d, out) = decide(i, "NAS.home", 1, "192.0.2.10", None);
        assert_eq!(blocked_by(i, d), Some(("base", None)));
        assert!(out.windows(4).any(|w| w == [192, 0, 2, 5]));
        match decide(i, "www.search.example", 1, client, None).0 {
            PolicyDecision::Chase {
                target,
                ttl,
                blocked,
            } => {
                assert_eq!(target.qname(), b"\x09forcesafe\x07example\x03net\x00");
                assert_eq!((ttl, blocked.list), (3600, None));
            }
            other => panic!("{other:?}"),
        }
        // A CNAME query for a CNAME rewrite gets the CNAME itself.
        let (d, out) = decide(i, "www.search.example", rtype::CNAME, client, None);
        assert!(matches!(d, PolicyDecision::Answer(_)));
        assert_eq!(wire::read_u16(&out, wire::ANCOUNT_AT), Some(1));
    }

    #[test]
    fn counts_are_per_core_and_summed_by_policy_and_list() {
        let World { index, .. } = world(SATURDAY);
        let (d, _) = decide(&index, "x.ads.example", 1, "203.0.113.9", None);
        let PolicyDecision::Answer(blocked) = d else {
            panic!("{d:?}");
        };
        index.count(0, blocked);
        index.count(1, blocked);
        index.count(99, blocked); // clamped to the last core
        index.count(
            0,
            Blocked {
                policy: blocked.policy,
                list: None,
            },
        );
        let counts = index.counts();
        assert!(counts.contains(&("base", "ads", 3)), "{counts:?}");
        assert!(counts.contains(&("base", "rewrite", 1)));
        assert!(counts.contains(&("kids", "kids", 0)));
        assert_eq!(
            index.counters[1].len(),
            1,
            "one cache line per core holds them"
        );
        assert_eq!(align_of::<CounterLine>(), 64);
        // An empty index counts nothing and panics on nothing.
        PolicyIndex::default().count(3, blocked);
        assert!(PolicyIndex::default().counts().is_empty());
    }

    #[test]
    fn explain_names_groups_policies_and_the_rule_as_its_list_writes_it() {
        let World { index, .. } = world(SATURDAY);
        let name = |t: &str| name::to_wire(t).unwrap();
        let e = index.explain(&name("a.b.ads.example"), "192.0.2.1".parse().unwrap(), None);
        assert_eq!(e.groups, vec!["kids".to_owned()]);
        assert_eq!(e.policies, vec!["base".to_owned(), "kids".to_owned()]);
        assert_eq!(e.verdict, "blocked");
        assert_eq!(e.policy.as_deref(), Some("base"));
        assert_eq!(e.list.as_deref(), Some("ads"));
        assert_eq!(e.rule.as_deref(), Some("||ads.example^"));
        let e = index.explain(&name("ok.ads.example"), "192.0.2.1".parse().unwrap(), None);
        assert_eq!(
            (e.verdict, e.rule.as_deref()),
            ("allowed", Some("@@||ok.ads.example^"))
        );
        let e = index.explain(
            &name("x.malware.example"),
            "203.0.113.1".parse().unwrap(),
            None,
        );
        assert_eq!(e.groups, vec!["default".to_owned()]);
        assert_eq!(e.rule.as_deref(), Some("*.malware.example CNAME ."));
        let e = index.explain(&name("nas.home"), "203.0.113.1".parse().unwrap(), None);
        assert_eq!(
            (e.verdict, e.rule.as_deref()),
            ("rewritten", Some("nas.home → 192.0.2.5"))
        );
        let e = index.explain(&name("example.org"), "203.0.113.1".parse().unwrap(), None);
        assert_eq!((e.verdict, e.policy), ("none", None));
        let e = index.explain(&name("games.example"), "192.0.2.1".parse().unwrap(), None);
        assert_eq!(e.rule.as_deref(), Some("games.example"));
    }

    #[test]
    fn client_ids_come_from_an_sni_one_label_under_a_client_id_domain() {
        let World { index, .. } = world(SATURDAY);
        let mut buffer = [0u8; 63];
        assert_eq!(
            index.client_id_from_sni("Kids-Tablet.DNS.example.net", &mut buffer),
            Some("kids-tablet")
        );
        assert_eq!(
            index.client_id_from_sni("kids.dns.example.net.", &mut buffer),
            Some("kids")
        );
        for sni in [
            "dns.example.net",
            "a.b.dns.example.net",
            "kids.dns.example.org",
            "kids.example.net",
            ".dns.example.net",
            "",
            "k!ds.dns.example.net",
        ] {
            assert_eq!(index.client_id_from_sni(sni, &mut buffer), None, "{sni}");
        }
    }

    /// An upstream reply for `qname` whose answer is a CNAME chain to `final_name`.
    fn chain_reply(qname: &str, chain: &[&str], id: u16) -> Vec<u8> {
        use domain::base::message_builder::{MessageBuilder, StaticCompressor};
        use domain::base::{Name, Rtype};
        use domain::rdata::{A, Cname};
        use std::str::FromStr;
        let mut builder = MessageBuilder::from_target(StaticCompressor::new(Vec::new())).unwrap();
        builder.header_mut().set_id(id);
        builder.header_mut().set_qr(true);
        let mut question = builder.question();
        let owner = Name::<Vec<u8>>::from_str(qname).unwrap();
        question.push((&owner, Rtype::A)).unwrap();
        let mut answer = question.answer();
        let mut from = owner;
        for next in chain {
            let next = Name::<Vec<u8>>::from_str(next).unwrap();
            answer.push((&from, 300, Cname::new(next.clone()))).unwrap();
            from = next;
        }
        answer
            .push((&from, 300, A::from_octets(192, 0, 2, 44)))
            .unwrap();
        answer.finish().into_target()
    }

    #[test]
    fn cname_cloaking_blocks_an_answer_whose_chain_reaches_a_blocked_name() {
        let World { index, .. } = world(SATURDAY);
        let t0 = Instant::now();
        let check = |qname: &str, chain: &[&str], client: &str| -> (PolicyDecision, Vec<u8>) {
            let qwire = name::to_wire(qname).unwrap();
            let key = CacheKey::new(&qwire, 1, 1, false, false).unwrap();
            let reply = chain_reply(qname, chain, 9);
            let answer =
                CachedAnswer::from_reply(&reply, &key, 9, t0, &TtlPolicy::default()).unwrap();
            let m = wire::tests::query(qname, 1, Some((1232, 0, false)));
            let q = Query::parse(&m).unwrap();
            let mut out = Vec::new();
            let d = index.cloaked(&answer, &q, client.parse().unwrap(), None, &UDP, &mut out);
            (d, out)
        };
        // metrics.shop.example → shop.eulerian.example → x.ads.example (blocked by `ads`).
        let (d, out) = check(
            "metrics.shop.example",
            &["shop.eulerian.example", "x.ads.example"],
            "203.0.113.1",
        );
        assert_eq!(blocked_by(&index, d), Some(("base", Some("ads"))));
        let msg = Message::from_slice(&out).unwrap();
        assert_eq!(msg.header().rcode().to_int(), rcode::NXDOMAIN);
        assert_eq!(
            msg.first_question().unwrap().qname().to_string(),
            "metrics.shop.example"
        );
        // Not for a chain of allowed names, nor for a client whose lists do not block it.
        assert_eq!(
            check("www.shop.example", &["cdn.example"], "203.0.113.1").0,
            PolicyDecision::Pass
        );
        assert_eq!(
            check(
                "a.shop.example",
                &["cloaked-tracker.example"],
                "203.0.113.1"
            )
            .0,
            PolicyDecision::Pass
        );
        assert!(matches!(
            check("a.shop.example", &["cloaked-tracker.example"], "192.0.2.3").0,
            PolicyDecision::Answer(_)
        ));
        // An allowed query name is not blocked through its chain.
        assert_eq!(
            check("ok.ads.example", &["x.ads.example"], "203.0.113.1").0,
            PolicyDecision::Pass
        );
        // An answer without a CNAME is one flag test.
        assert_eq!(
            check("plain.example", &[], "203.0.113.1").0,
            PolicyDecision::Pass
        );
    }

    #[test]
    fn an_empty_index_passes_everything() {
        let index = PolicyIndex::default();
        assert!(index.is_empty());
        assert_eq!(
            decide(&index, "x.ads.example", 1, "192.0.2.1", Some("kids")).0,
            PolicyDecision::Pass
        );
        let e = index.explain(b"\x01x\x00", "192.0.2.1".parse().unwrap(), None);
        assert_eq!(e.verdict, "none");
        assert_eq!(index.client_id_from_sni("a.b.c", &mut [0; 63]), None);
    }

    #[test]
    fn more_than_64_groups_are_reported_and_get_no_policy() {
        let (matcher, lists) = matcher();
        let specs: Vec<(String, ClientGroupSpec)> = (0..70)
            .map(|i| {
                let spec = ClientGroupSpec {
                    clients: vec![format!("10.0.{i}.0/24").parse().unwrap()],
                    client_ids: vec![],
                    ..Default::default()
                };
                (format!("g{i:02}"), spec)
            })
            .collect();
        let groups: Vec<GroupSpec<'_>> = specs
            .iter()
            .map(|(n, s)| GroupSpec { name: n, spec: s })
            .collect();
        let names: Vec<&str> = specs.iter().map(|(n, _)| n.as_str()).collect();
        let spec = policy(&names, &["ads"], &[]);
        let policies = [PolicySource {
            name: "p",
            spec: &spec,
        }];
        let (index, report) = PolicyIndex::build(BuildInputs {
            matcher: &matcher,
            lists: &lists,
            groups: &groups,
            policies: &policies,
            now: SATURDAY.parse().unwrap(),
            block_ttl: Duration::from_secs(60),
            client_id_domains: &[],
            cores: 1,
        });
        assert_eq!(
            report.groups_over_limit,
            vec!["g63", "g64", "g65", "g66", "g67", "g68", "g69"]
        );
        assert!(matches!(
            decide(&index, "a.ads.example", 1, "10.0.62.1", None).0,
            PolicyDecision::Answer(_)
        ));
        assert_eq!(
            decide(&index, "a.ads.example", 1, "10.0.63.1", None).0,
            PolicyDecision::Pass
        );
    }
}
