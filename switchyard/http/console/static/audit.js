// The audit page: GET /admin/audit, newest first, filtered, older entries by cursor.
"use strict";

(() => {
const {api, table, formValues, el} = window.Core;
let cursor = null;
let rows = [];

async function load(reset) {
  if (reset) { cursor = null; rows = []; }
  const q = new URLSearchParams({limit: "50"});
  const v = formValues(document.getElementById("audit-form"));
  for (const k of ["actor", "action", "target"]) if (v[k]) q.set(k, v[k]);
  if (cursor) q.set("cursor", cursor);
  const r = await api("GET", `/admin/audit?${q}`);
  rows = rows.concat(r.data);
  cursor = r.next_cursor;
  document.getElementById("audit-older").hidden = !cursor;
  const change = e => JSON.stringify(e.after ?? e.before ?? null);
  table(document.getElementById("audit-table"), [
    ["Time (UTC)", e => e.at.replace("T", " ").slice(0, 19)], ["Actor", e => e.email ? `${e.actor} (${e.email})` : e.actor],
    ["Role", e => e.role || "-"], ["Action", e => el("code", {}, e.action)], ["Target", e => e.target],
    ["After", e => el("code", {class: "wrap"}, change(e).slice(0, 200))], ["Client", e => e.client || "-"],
    ["Request", e => e.request_id || "-"]], rows);
}

function init() {
  document.getElementById("audit-form").addEventListener("submit", ev => {
    ev.preventDefault();
    window.Core.guarded(() => load(true));
  });
  document.getElementById("audit-older").addEventListener("click", () => window.Core.guarded(() => load(false)));
}

window.AuditPage = {init, load};
})();
