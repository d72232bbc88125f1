// Tokens (admin): list, create (the token is shown once), revoke.
import { h, api, get, field, table, say, errorText, fmtTime, showFieldError } from "../app.js";

export async function render(main) {
  const nameIn = h("input", { "data-key": "name", required: true, placeholder: "grafana" });
  const roleIn = h("select", { "data-key": "role" }, ["viewer", "operator", "admin"].map((r) => h("option", { value: r }, r)));
  const once = h("div", { "aria-live": "polite", id: "new-token" });
  const form = h("form", { class: "inline", id: "token-form" }, field("Name", nameIn), field("Role", roleIn), h("button", { type: "submit" }, "Create token"));
  const out = h("div", {});
  main.append(form, once, out);
  async function load() {
    const list = (await get("/tokens")).tokens || [];
    out.replaceChildren(table("Tokens", ["id", "name", "role", "created", "expires", "revoke"], list.map((t) => [
      h("span", { class: "mono" }, t.id), t.name || "", t.role, fmtTime(t.created || t.createdAt), fmtTime(t.expires || t.expiresAt),
      h("button", { type: "button", class: "danger", onclick: () => revoke(t.id) }, "Revoke")])));
  }
  async function revoke(id) {
    if (!window.confirm(`Revoke token ${id}? Its sessions end at once.`)) return;
    try { await api("DELETE", `/tokens/${encodeURIComponent(id)}`); say(`Token ${id} revoked.`, "ok"); await load(); } catch (e) { say(errorText(e), "error"); }
  }
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await api("POST", "/tokens", { name: nameIn.value.trim(), role: roleIn.value });
      once.replaceChildren(h("p", {}, "Copy this token now; it is not shown again:"), h("p", { class: "once mono" }, r.body.token));
      nameIn.value = "";
      await load();
    } catch (e) { showFieldError(form, e); }
  });
  await load();
}
