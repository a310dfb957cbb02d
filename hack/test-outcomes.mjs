// A reporter for `node --test` that hack/run-tests.mjs adds beside the
// visible one: one JSON line per skipped or todo test or suite, and the
// runner's own totals, for the skip check after the run.

const TOTAL = /^(tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$/;

export default async function* outcomes(source) {
  for await (const { type, data } of source) {
    if ((type === 'test:pass' || type === 'test:fail') && (data.skip !== undefined || data.todo !== undefined)) {
      const kind = data.details?.type === 'suite' ? 'suite' : 'test';
      yield `${JSON.stringify({ kind, file: data.file, name: data.name, skip: data.skip, todo: data.todo })}\n`;
    } else if (type === 'test:diagnostic' && data.nesting === 0) {
      const m = TOTAL.exec(data.message);
      if (m !== null) yield `${JSON.stringify({ total: m[1], count: Number(m[2]) })}\n`;
    }
  }
}
