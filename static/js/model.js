// The session page's model: the server's derived state, kept current by its patches.
//
// The server's reducer (rtvi_monitor/core/state.py) is the only place where the
// rules live. It sends a snapshot ({state, bases}: state.to_dict() and where
// each list starts) and then, with every stored batch, the patch its
// take_changes() made. Applying them in order gives exactly the server's state;
// this module applies and never derives (the reference is
// rtvi_monitor.patches.apply_changes, and tests check both against the reducer).

/**
 * A model from a snapshot frame.
 * @param {{state: object, bases: object}} snapshot
 * @returns {{state: object, bases: object, version: number}}
 */
export function createModel(snapshot) {
  const state = structuredClone(snapshot.state || {});
  return { state, bases: structuredClone(snapshot.bases || {}), version: state.version || 0 };
}

/**
 * Whether a batch {from, to} continues the model, repeats what it has, or leaves a gap.
 * @returns {"apply" | "skip" | "gap"}
 */
export function batchFits(model, batch) {
  if (batch.to <= model.version) return "skip";
  return batch.from === model.version ? "apply" : "gap";
}

/**
 * Apply one patch (take_changes() on the server) to the model, in place.
 * @param {{state: object, bases: object, version: number}} model
 * @param {object} changes {head?, tails?, function_calls?, client_messages?}
 */
export function applyChanges(model, changes) {
  Object.assign(model.state, changes.head || {});
  for (const key of ["function_calls", "client_messages"]) {
    if (key in changes) model.state[key] = changes[key];
  }
  walk(changes.tails || {}, model.state, model.bases);
  model.version = model.state.version ?? model.version;
}

function walk(patches, target, bases) {
  for (const [key, patch] of Object.entries(patches)) {
    if (Array.isArray(patch.items) && typeof patch.at === "number") {
      const items = own(target, key, () => []);
      const start = Object.hasOwn(bases, key) ? bases[key] : 0;
      // Keep positions [base, at), then the patch's items. The front goes before the push:
      // when more than the server's limit came since the last patch, at is base and
      // the model has none of the positions in between.
      items.length = Math.max(0, Math.min(items.length, patch.at - start));
      items.splice(0, patch.base - start);
      for (const item of patch.items) items.push(item); // push(...items) overflows the stack on long lists
      put(bases, key, patch.base);
    } else {
      walk(patch, own(target, key, () => ({})), own(bases, key, () => ({})));
    }
  }
}

// Metric kinds are named by the bot: "constructor" or "__proto__" must be plain
// keys of the model, never what objects inherit.
function own(target, key, make) {
  if (!Object.hasOwn(target, key)) put(target, key, make());
  return target[key];
}

function put(target, key, value) {
  Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
}
