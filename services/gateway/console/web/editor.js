// The console's workload editor, bundled by esbuild into
// static/vendor/editor.mjs (`make console-assets`): CodeMirror 6 with YAML
// (JSON is YAML too), a YAML parser that knows where each field is, and a
// line diff.
import { EditorView, basicSetup } from 'codemirror';
import { yaml } from '@codemirror/lang-yaml';
import { lintGutter, setDiagnostics } from '@codemirror/lint';
import { LineCounter, parseDocument, stringify as yamlStringify } from 'yaml';

// createEditor makes an editor in parent holding doc.
export function createEditor(parent, doc) {
  return new EditorView({
    doc,
    parent,
    extensions: [basicSetup, yaml(), lintGutter(), EditorView.lineWrapping, EditorView.contentAttributes.of({ 'aria-label': 'Workload document (YAML or JSON)' })],
  });
}

export function getText(view) {
  return view.state.doc.toString();
}

export function setText(view, text) {
  view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
}

// showErrors marks each {line, message} (lines from 1) in the editor.
export function showErrors(view, errors) {
  const doc = view.state.doc;
  const diagnostics = errors.map((e) => {
    const line = doc.line(Math.min(Math.max(1, e.line || 1), doc.lines));
    return { from: line.from, to: line.to, severity: 'error', message: e.message };
  });
  view.dispatch(setDiagnostics(view.state, diagnostics));
}

// pathOf splits a field path like spec.template.containers[0].image.
export function pathOf(field) {
  const out = [];
  for (const part of String(field).split('.')) {
    const m = part.match(/^([^[\]]*)((?:\[\d+\])*)$/);
    if (!m) {
      out.push(part);
      continue;
    }
    if (m[1]) out.push(m[1]);
    for (const i of m[2].matchAll(/\[(\d+)\]/g)) out.push(Number(i[1]));
  }
  return out;
}

// parse reads a YAML or JSON document: {value, errors: [{line, message}],
// lineOf(field)}, lineOf giving the line of a field path, or of its
// nearest ancestor that is written.
export function parse(text) {
  const lc = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lc, prettyErrors: false });
  const errors = doc.errors.map((e) => ({ line: lc.linePos(e.pos[0]).line, message: e.message.split('\n')[0] }));
  const lineOf = (field) => {
    const path = pathOf(field);
    for (let n = path.length; n > 0; n--) {
      const sub = path.slice(0, n);
      const parent = n > 1 ? doc.getIn(sub.slice(0, -1), true) : doc.contents;
      // The key's line, when the parent is a map: the value may start lines below.
      const pair = parent?.items?.find?.((it) => it?.key && String(it.key.value ?? it.key) === String(sub[n - 1]));
      const node = pair?.key?.range ? pair.key : doc.getIn(sub, true);
      if (node?.range) return lc.linePos(node.range[0]).line;
    }
    return 1;
  };
  return { value: errors.length ? null : doc.toJS(), errors, lineOf };
}

// stringify writes a value as YAML.
export function stringify(value) {
  return yamlStringify(value, { lineWidth: 0 });
}

// diffLines compares two texts line by line: [{op: ' '|'-'|'+', text}].
export function diffLines(a, b) {
  const x = a === '' ? [] : a.replace(/\n$/, '').split('\n');
  const y = b === '' ? [] : b.replace(/\n$/, '').split('\n');
  const n = x.length;
  const m = y.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) {
      out.push({ op: ' ', text: x[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: '-', text: x[i++] });
    else out.push({ op: '+', text: y[j++] });
  }
  while (i < n) out.push({ op: '-', text: x[i++] });
  while (j < m) out.push({ op: '+', text: y[j++] });
  return out;
}
