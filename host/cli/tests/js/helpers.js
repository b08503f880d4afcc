// A second module of the suite: imported by suite.js, packed by `wfhost build` beside it.

export function double(value) {
  return value * 2;
}
