// Teams and keys: list, create (the key shown once), revoke, rotate with a grace period, edit
// limits / allowlists / expiry; spend against quotas. Each action is one documented /admin call.
"use strict";

(() => {
const {api, el, table, guarded, usd, num, utc, toInstant, utcInput, formValues, limitsFrom, modelList} = window.Core;
const LIMITS = ["rpm", "tpm", "max_concurrency", "tokens_per_day", "tokens_per_month", "spend_per_day",
                "spend_per_month"];
// Quotas: the limit, the usage it is held against ([period, metric]) and the words for "reached".
const QUOTAS = {tokens_per_day: ["day", "total_tokens", "daily token quota"],
                tokens_per_month: ["month", "total_tokens", "monthly token quota"],
                spend_per_day: ["day", "cost_usd", "daily spend quota"],
                spend_per_month: ["month", "cost_usd", "monthly spend quota"]};

const limitText = (k, v) => `${k} ${k.startsWith("spend") ? usd(v) : num(v)}`;

function limitsText(l) {
  const parts = Object.entries(l || {}).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => limitText(k, v));
  return parts.join(", ") || "none";
}

// What is in effect for a key: its own limits and its team's (both apply), each marked.
function effectiveLimits(k, team) {
  const rows = [];
  for (const n of LIMITS) {
    const own = k.limits[n], shared = team && team.limits[n];
    if (own !== null && own !== undefined) rows.push(el("li", {}, limitText(n, own), el("small", {}, " key")));
    if (shared !== null && shared !== undefined) rows.push(el("li", {}, limitText(n, shared), el("small", {}, " team")));
  }
  return rows.length ? el("ul", {class: "effective"}, ...rows) : "none";
}

function effectiveModels(k, team) {
  const own = k.models, shared = team && team.models;
  if (!own && !shared) return "any";
  if (own && !shared) return el("span", {}, own.join(", "), el("small", {}, " key"));
  if (!own) return el("span", {}, shared.join(", "), el("small", {}, " team"));
  return el("span", {}, `${own.join(", ")} `, el("small", {}, "key"), ` and ${shared.join(", ")} `, el("small", {}, "team"));
}

function quotaBar(spent, quota, label) {
  if (!quota) return el("span", {class: "muted"}, `${usd(spent)} (no ${label} quota)`);
  return el("span", {class: "quota"},
    el("meter", {min: 0, max: quota, value: Math.min(spent, quota), low: quota * 0.7, high: quota * 0.9,
                 optimum: 0, title: `${usd(spent)} of ${usd(quota)}`}),
    ` ${usd(spent)} / ${usd(quota)}`);
}

// A key's spend today against the quota in effect: its own, else its team's (a key the team's
// quota blocks has a quota: the team's), else none.
function keySpend(spent, own, teamSpent, teamQuota) {
  if (own || !teamQuota) return quotaBar(spent, own, "daily");
  return el("span", {}, `${usd(spent)} `, el("small", {}, "team"), " ", quotaBar(teamSpent, teamQuota, "daily"));
}

function monthStart() {
  const d = new Date();
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, "0")}-01`;
}

async function usageBy(group, from) {
  const q = new URLSearchParams({group_by: group});
  if (from) { q.set("from", from); q.set("to", new Date().toISOString().slice(0, 10)); }
  const r = await api("GET", `/admin/usage?${q}`);
  return Object.fromEntries(r.data.map(row => [row[group], row]));
}

// The quotas of ``limits`` that ``used`` ({day, month} usage rows) has reached.
function reached(limits, used) {
  const out = [];
  for (const [n, [period, metric, words]] of Object.entries(QUOTAS)) {
    const q = limits && limits[n];
    const u = used[period] ? used[period][metric] : 0;
    if (q !== null && q !== undefined && u >= q) out.push(words);
  }
  return out;
}

function showNewKey(id, key) {
  document.getElementById("new-key-id").textContent = id;
  document.getElementById("new-key").textContent = key;
  document.getElementById("new-key-box").hidden = false;
}

// [state, why]: revoked, expired, blocked (a quota of the key or its team reached, or refusing
// its requests in the last five minutes), limited (a rate limit refusing it now), or active.
function keyState(k, teamBlocked, used, recent) {
  if (k.revoked) return ["revoked", "revoked"];
  if (k.expires_at && new Date(k.expires_at) <= new Date()) return ["expired", `expired ${utc(k.expires_at)} UTC`];
  const own = reached(k.limits, used);
  if (own.length) return ["blocked", `blocked: key's ${own.join(", ")} reached`];
  if (teamBlocked.length) return ["blocked", `blocked: team's ${teamBlocked.join(", ")}`];
  const quota = recent.filter(r => r.reason.startsWith("quota:"));
  if (quota.length) return ["blocked", `blocked: ${quota.map(r => `${r.reason} (${r.refused} refused)`).join(", ")}`];
  const rate = recent.filter(r => r.reason.startsWith("rate_limit:"));
  if (rate.length) return ["limited", `limited: ${rate.map(r => `${r.reason} (${r.refused} refused)`).join(", ")}`];
  return ["active", "active"];
}

const cost = row => (row ? row.cost_usd : 0);

async function load() {
  const month = monthStart();
  const [teams, keys, dayTeam, monthTeam, dayKey, monthKey, ov] = await Promise.all([
    api("GET", "/admin/teams"), api("GET", "/admin/keys"), usageBy("team"), usageBy("team", month),
    usageBy("key"), usageBy("key", month), api("GET", "/admin/overview?range=1h")]);
  const teamOf = Object.fromEntries(teams.data.map(t => [t.name, t]));
  // Refusals of the last five minutes: a team quota refusing any of its keys blocks the team.
  const recentOf = k => ov.refused_now.filter(r => r.key === k.id && r.team === k.team);
  const teamBlocked = Object.fromEntries(teams.data.map(t => {
    const why = reached(t.limits, {day: dayTeam[t.name], month: monthTeam[t.name]}).map(w => `${w} reached`);
    const now = ov.refused_now.filter(r => r.team === t.name && r.reason.startsWith("quota:") && r.reason.endsWith("@team"));
    for (const r of new Set(now.map(r => r.reason))) {
      if (!why.length) why.push(`${r} refusing requests`);
    }
    return [t.name, why];
  }));
  table(document.getElementById("teams-table"), [
    ["Team", t => t.name], ["Source", t => t.source], ["Limits", t => limitsText(t.limits)],
    ["Models", t => (t.models || ["any"]).join(", ")],
    ["State", t => teamBlocked[t.name].length
      ? el("span", {class: "state blocked", "data-team-state": t.name}, `blocked: ${teamBlocked[t.name].join(", ")}`)
      : el("span", {class: "state active", "data-team-state": t.name}, "active")],
    ["Spend today", t => quotaBar(cost(dayTeam[t.name]), t.limits.spend_per_day, "daily")],
    ["Spend this month", t => quotaBar(cost(monthTeam[t.name]), t.limits.spend_per_month, "monthly")],
    ["Key policy", t => el("span", {"data-policy": t.name}, policyText(t.key_policy))],
  ], teams.data);
  for (const id of ["key-team", "policy-team"]) {
    document.getElementById(id).replaceChildren(...teams.data.map(t => el("option", {value: t.name}, t.name)));
  }
  table(document.getElementById("keys-table"), [
    ["Key", k => k.id], ["Team", k => k.team], ["Source", k => k.source],
    ["Models in effect", k => el("span", {"data-key-models": k.id}, effectiveModels(k, teamOf[k.team]))],
    ["Limits in effect", k => el("span", {"data-key-limits": k.id}, effectiveLimits(k, teamOf[k.team]))],
    ["Expires (UTC)", k => k.expires_at ? utc(k.expires_at) : "never"],
    ["State", k => {
      const [state, why] = keyState(k, teamBlocked[k.team] || [], {day: dayKey[k.id], month: monthKey[k.id]},
                                    recentOf(k));
      return el("span", {class: `state ${state}`, "data-key-state": k.id, title: why}, ["blocked", "limited"].includes(state) ? why : state);
    }],
    ["Spend today", k => el("span", {"data-key-spend": k.id}, keySpend(cost(dayKey[k.id]), k.limits.spend_per_day,
                                                                         cost(dayTeam[k.team]), (teamOf[k.team] || {limits: {}}).limits.spend_per_day))],
    ["", k => el("span", {class: "actions"},
      el("button", {onclick: () => edit(k), "data-edit": k.id}, "Edit"),
      k.source === "admin" && !k.revoked ? el("button", {onclick: () => rotate(k), "data-rotate": k.id}, "Rotate") : "",
      k.revoked ? "" : el("button", {class: "danger", onclick: () => revoke(k), "data-revoke": k.id}, "Revoke"))],
  ], keys.data);
}

function policyText(p) {
  if (!p) return "none";
  const parts = [];
  if (p.defaults && Object.keys(p.defaults).length) parts.push(`defaults ${limitsText(p.defaults)}`);
  if (p.max_expiry_days) parts.push(`expiry at most ${p.max_expiry_days} days`);
  if (p.models) parts.push(`models ${p.models.join(", ")}`);
  return parts.join("; ") || "none";
}

function revoke(k) {
  if (!confirm(`Revoke key ${k.id}? Requests with it are refused within a second.`)) return;
  guarded(async () => { await api("POST", `/admin/keys/${encodeURIComponent(k.id)}/revoke`); await load(); });
}

function rotate(k) {
  const dlg = document.getElementById("rotate-dialog");
  document.getElementById("rotate-id").textContent = k.id;
  dlg.onclose = () => {
    if (dlg.returnValue !== "ok") return;
    const grace = Number(new FormData(document.getElementById("rotate-form")).get("grace_seconds") || 0);
    guarded(async () => {
      const r = await api("POST", `/admin/keys/${encodeURIComponent(k.id)}/rotate`, {grace_seconds: grace});
      showNewKey(r.id, r.key);
      await load();
    });
  };
  dlg.showModal();
}

function edit(k) {
  const dlg = document.getElementById("edit-dialog");
  const form = document.getElementById("edit-form");
  document.getElementById("edit-id").textContent = k.id;
  for (const n of LIMITS) form.elements[n].value = k.limits[n] ?? "";
  form.elements.models.value = (k.models || []).join(", ");
  form.elements.expires_at.value = k.expires_at ? utcInput(k.expires_at) : "";
  dlg.onclose = () => {
    if (dlg.returnValue !== "ok") return;
    const v = formValues(form);
    guarded(async () => {
      await api("PATCH", `/admin/keys/${encodeURIComponent(k.id)}`, {
        limits: limitsFrom(v, LIMITS), models: modelList(v.models), expires_at: toInstant(v.expires_at) || null});
      await load();
    });
  };
  dlg.showModal();
}

function init() {
  document.getElementById("new-key-done").addEventListener("click", () => {
    document.getElementById("new-key").textContent = "";
    document.getElementById("new-key-box").hidden = true;
  });
  document.getElementById("key-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const v = formValues(ev.target);
    const body = {team: v.team, limits: limitsFrom(v, LIMITS), models: modelList(v.models)};
    for (const [k, x] of Object.entries(body.limits)) if (x === null) delete body.limits[k];
    if (v.id) body.id = v.id;
    if (v.expires_at) body.expires_at = toInstant(v.expires_at);
    guarded(async () => {
      const r = await api("POST", "/admin/keys", body);
      showNewKey(r.id, r.key);
      ev.target.reset();
      await load();
    });
  });
  document.getElementById("policy-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const v = formValues(ev.target);
    const defaults = limitsFrom(v, ["rpm", "tpm", "tokens_per_day", "spend_per_day"]);
    for (const [k, x] of Object.entries(defaults)) if (x === null) delete defaults[k];
    const body = {defaults: Object.keys(defaults).length ? defaults : null,
                  max_expiry_days: v.max_expiry_days ? Number(v.max_expiry_days) : null, models: modelList(v.models)};
    guarded(async () => {
      await api("PUT", `/admin/teams/${encodeURIComponent(v.team)}/key_policy`, body);
      ev.target.reset();
      await load();
    });
  });
  document.getElementById("team-form").addEventListener("submit", ev => {
    ev.preventDefault();
    const v = formValues(ev.target);
    const limits = limitsFrom(v, LIMITS);
    for (const [k, x] of Object.entries(limits)) if (x === null) delete limits[k];
    const body = {limits};
    if (v.models) body.models = modelList(v.models);  // empty: the team's allowlist stays as it is
    guarded(async () => {
      await api("PUT", `/admin/teams/${encodeURIComponent(v.name)}`, body);
      ev.target.reset();
      await load();
    });
  });
}

window.KeysPage = {init, load};
})();
