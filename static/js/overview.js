// The Overview updates itself: whenever the session socket says a session started, changed or
// ended, the page fetches its content again from the server (which computed every figure on it)
// and puts it in place. A timer does the same every 30 s, for what changes with time alone
// (an hour's window moving, an alert resolving). An operator at a firing alert's form (acknowledge,
// silence) holds the panel still for a while, so that the form is not swept away under the hand.
import { liveSocket } from "./live.js";
import { upgradeTimes } from "./format.js";

const panel = document.getElementById("overview");
const status = document.getElementById("conn");
const MIN_GAP_MS = 2000; // at most one fetch per 2 s, however busy the socket
const EVERY_MS = 30000;
const HOLD_MS = 15000; // the longest an operator at an alert's form holds the panel still
const RETRY_MS = 500; // how soon a held refresh asks again

let last = 0;
let timer = null;
let inFlight = false;
let heldSince = null;

/** Whether an operator is at one of the panel's forms: the pointer on an alert's actions, or the focus in a form. */
function atAForm() {
  const active = document.activeElement;
  const focused = active !== null && panel.contains(active) && active.closest("form") !== null;
  return focused || panel.querySelector(".alert-actions:hover") !== null;
}

/** The panel's content replaced; the field the operator was in (by its id) keeps its value and the focus. */
function replacePanel(fresh) {
  const active = document.activeElement;
  const kept = active?.id && panel.contains(active) ? { id: active.id, value: active.value } : null;
  panel.replaceChildren(fresh);
  const again = kept ? document.getElementById(kept.id) : null;
  if (again === null) return;
  if (typeof kept.value === "string" && [...(again.options ?? [])].some((o) => o.value === kept.value)) again.value = kept.value;
  again.focus();
}

async function refresh() {
  timer = null;
  if (inFlight) {
    schedule();
    return;
  }
  if (atAForm()) {
    heldSince ??= Date.now();
    if (Date.now() - heldSince < HOLD_MS) {
      timer = setTimeout(refresh, RETRY_MS);
      return;
    }
  }
  heldSince = null;
  inFlight = true;
  last = Date.now();
  try {
    const response = await fetch(panel.dataset.panelUrl, { headers: { Accept: "text/html" }, credentials: "same-origin" });
    if (response.redirected || !response.ok) {
      status.textContent = `could not refresh (HTTP ${response.status}); showing what was loaded`;
      status.classList.add("down");
      return;
    }
    // Server-rendered and escaped by Django's templates: bot text in it is text, never markup.
    const fresh = document.createRange().createContextualFragment(await response.text());
    replacePanel(fresh);
    upgradeTimes(panel);
    panel.dataset.refreshedAt = String(last);
  } catch (error) {
    status.textContent = "could not refresh; showing what was loaded";
    status.classList.add("down");
    console.error(error);
  } finally {
    inFlight = false;
  }
}

function schedule() {
  if (timer !== null) return;
  timer = setTimeout(refresh, Math.max(0, last + MIN_GAP_MS - Date.now()));
}

liveSocket(() => panel.dataset.ws, schedule, status);
setInterval(schedule, EVERY_MS);
