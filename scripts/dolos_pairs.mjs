// Dolos (npm @dodona/dolos-lib) on groups of Python snippets, for scripts/similarity_calibration.py --tool dolos.
// Dolos is not a dependency of the course: install it anywhere (npm install --prefix DIR @dodona/dolos-lib) and
// pass DIR in DOLOS_DIR.  stdin: {"options": {...Dolos options}, "groups": [{"files": [[name, text], ...],
// "ignore": text or null, "from": n}]}; stdout: for each group, [[i, j, similarity, leftCovered, leftTotal,
// rightCovered, rightTotal], ...] for every pair of its files with j >= "from" (i, j: positions in "files").
import path from "node:path";
import { pathToFileURL } from "node:url";

const lib = path.join(process.env.DOLOS_DIR, "node_modules", "@dodona", "dolos-lib", "dist", "index.js");
const core = path.join(process.env.DOLOS_DIR, "node_modules", "@dodona", "dolos-core", "dist", "index.js");
const { Dolos } = await import(pathToFileURL(lib).href);
const { File } = await import(pathToFileURL(core).href);

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { groups, options } = JSON.parse(input);
const out = [];
for (const group of groups) {
  const dolos = new Dolos({ language: "python", ...options });
  const files = group.files.map(([name, text], i) => new File(`${i}-${name}.py`, text));
  const ignore = group.ignore ? new File("boilerplate.py", group.ignore) : undefined;
  const report = await dolos.analyze(files, "calibration", ignore);
  const tokenized = report.files;
  const rows = [];
  for (let j = group.from || 0; j < tokenized.length; j++) {
    for (let i = 0; i < j; i++) {
      const p = report.getPair(tokenized[j], tokenized[i]);
      const jLeft = p.leftFile === tokenized[j];
      rows.push([j, i, p.similarity, jLeft ? p.leftCovered : p.rightCovered, jLeft ? p.leftTotal : p.rightTotal,
        jLeft ? p.rightCovered : p.leftCovered, jLeft ? p.rightTotal : p.leftTotal]);
    }
  }
  out.push(rows);
}
process.stdout.write(JSON.stringify(out));
