// The settings' alert rule form: when another condition is chosen, the threshold's unit beside its input,
// its placeholder (the condition's default) and the window's say that condition's.
//
// The server decides every word (rtvi_monitor/alerts/thresholds.py `units`, in the input's data-units) and
// converts what is typed to what is stored; this module only shows the chosen condition's words
// (textContent only), and turns the threshold off for a condition that takes none.

/**
 * What the threshold and window inputs say for a condition.
 * @param {Record<string, {unit: string, default: string, none: string, window: string}>} units
 * @param {string} condition
 * @returns {{unit: string, placeholder: string, disabled: boolean, window: string}}
 */
export function thresholdFor(units, condition) {
  const said = units?.[condition];
  if (!said) return { unit: "", placeholder: "", disabled: false, window: "" };
  return { unit: said.none || said.unit, placeholder: said.default, disabled: Boolean(said.none), window: said.window };
}

function follow(form) {
  const condition = form.querySelector("select[name=condition]");
  const threshold = form.querySelector("input[name=threshold]");
  const windowInput = form.querySelector("input[name=window_minutes]");
  const unit = threshold && document.getElementById(`${threshold.id}-unit`);
  if (!condition || !threshold?.dataset.units || !unit) return;
  const units = JSON.parse(threshold.dataset.units);
  condition.addEventListener("change", () => {
    const shown = thresholdFor(units, condition.value);
    unit.textContent = shown.unit;
    threshold.placeholder = shown.placeholder;
    threshold.disabled = shown.disabled;
    if (shown.disabled) threshold.value = "";
    if (windowInput) windowInput.placeholder = shown.window;
  });
}

if (typeof document !== "undefined") {
  for (const form of document.querySelectorAll("form[data-testid=rule-form]")) follow(form);
}
