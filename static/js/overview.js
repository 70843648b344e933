// The Overview updates itself: whenever the session socket says a session started, changed or
// ended, the page fetches its content again from the server (which computed every figure on it)
// and puts it in place. A timer does the same every 30 s, for what changes with time alone
// (an hour's window moving, an alert resolving).
import { liveSocket } from "./live.js";
import { upgradeTimes } from "./format.js";

const panel = document.getElementById("overview");
const status = document.getElementById("conn");
const MIN_GAP_MS = 2000; // at most one fetch per 2 s, however busy the socket
const EVERY_MS = 30000;

let last = 0;
let timer = null;
let inFlight = false;

async function refresh() {
  timer = null;
  if (inFlight) {
    schedule();
    return;
  }
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
    panel.replaceChildren(fresh);
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
