// The session page's "Act on the call" card: end a live call, or send text into it (RTVI send-text).
//
// The server decides (rtvi_monitor/live/control.py): GET control/ says whether the bot can be asked now and
// why not; POST end/ and send-text/ ask it and answer with what the bot said. This module only shows
// that: buttons enabled or disabled with the reason, and each answer as text (textContent only).
// It asks again when the page's status changes (session.js keeps #status current), and every 15 s.

const REFRESH_MS = 15000;
const card = typeof document === "undefined" ? null : document.getElementById("control");

/**
 * What the card says for a GET control/ answer.
 * @param {{available?: boolean, reason?: string, allowed?: boolean, allowed_reason?: string}} answer
 * @returns {{enabled: boolean, text: string}}
 */
export function controlState(answer) {
  if (answer.allowed === false) return { enabled: false, text: `Unavailable: ${answer.allowed_reason || "your role may not act on calls"}.` };
  if (!answer.available) return { enabled: false, text: `Unavailable: ${answer.reason || "the bot cannot be asked now"}.` };
  return { enabled: true, text: "The bot takes the dashboard's control: you can end the call or send it text." };
}

/**
 * What the card says for a POST answer (its HTTP status and JSON body).
 * @param {string} action "end" or "send-text"
 * @param {number} status
 * @param {{ok?: boolean, error?: string, answer?: string}} body
 */
export function resultText(action, status, body) {
  const what = action === "end" ? "End" : "Text";
  if (body?.ok) return `${what}: ${body.answer || "the bot took it"}.`;
  return `${what} not done (HTTP ${status}): ${body?.error || "no answer"}.`;
}

function csrfToken() {
  return card.querySelector("input[name=csrfmiddlewaretoken]")?.value || "";
}

async function post(url, body) {
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: JSON.stringify(body),
  });
  let answer = {};
  try {
    answer = await response.json();
  } catch {
    answer = { error: `HTTP ${response.status}` };
  }
  return { status: response.status, body: answer };
}

function start() {
  const $ = (id) => document.getElementById(id);
  const status = $("control-status");
  const result = $("control-result");
  const buttons = [$("control-send-button"), $("control-end")];
  let busy = false;
  let enabled = false;

  function show(state) {
    enabled = state.enabled;
    status.textContent = state.text;
    card.dataset.available = String(state.enabled);
    for (const button of buttons) button.disabled = busy || !enabled;
  }

  let observer = null;
  let timer = 0;

  async function refresh() {
    if (!card.isConnected) {
      // The call ended and its page took the card away (session.js): nothing to ask any more.
      observer?.disconnect();
      clearInterval(timer);
      return;
    }
    try {
      const response = await fetch(card.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } });
      const answer = await response.json();
      show(response.ok ? controlState(answer) : { enabled: false, text: `Unavailable: ${answer.error || `HTTP ${response.status}`}.` });
    } catch {
      show({ enabled: false, text: "Unavailable: the dashboard could not be asked; trying again." });
    }
  }

  async function act(action, url, body) {
    busy = true;
    show({ enabled, text: status.textContent });
    result.textContent = action === "end" ? "Asking the bot to end the call…" : "Sending the text to the bot…";
    try {
      const { status: code, body: answer } = await post(url, body);
      result.textContent = resultText(action, code, answer);
      result.dataset.ok = String(Boolean(answer.ok));
      if (answer.ok && action === "send-text") $("control-text").value = "";
    } catch (error) {
      result.textContent = `${action === "end" ? "End" : "Text"} not done: ${error.message}.`;
      result.dataset.ok = "false";
    } finally {
      busy = false;
      await refresh();
    }
  }

  $("control-send").addEventListener("submit", (event) => {
    event.preventDefault();
    const content = $("control-text").value;
    if (!content.trim()) {
      result.textContent = "Write the text to send first.";
      return;
    }
    const options = { run_immediately: $("control-run").checked, audio_response: $("control-audio").checked };
    act("send-text", card.dataset.sendUrl, { content, options });
  });
  $("control-end").addEventListener("click", () => {
    const cancel = $("control-cancel").checked;
    const question = cancel ? "Cut the call off now (cancel its pipeline)?" : "End the call (the bot finishes what it is saying)?";
    if (!window.confirm(question)) return;
    act("end", card.dataset.endUrl, { cancel });
  });

  // The page's status pill changes as the session goes away, comes back or ends: ask again then.
  const pill = document.getElementById("status");
  if (pill) {
    observer = new MutationObserver(() => refresh());
    observer.observe(pill, { childList: true, characterData: true, subtree: true, attributes: true });
  }
  timer = setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
  refresh();
}

if (card) start();
