// Dolos (npm @dodona/dolos-lib) on groups of Python snippets, for scripts/similarity_calibration.py --tool dolos.
// Dolos is not a dependency of the course: install it anywhere (npm install --prefix DIR @dodona/dolos-lib) and
// pass DIR in DOLOS_DIR.  stdin: {"options": {...Dolos options}, "groups": [{"files": [[name, text], ...],
// "ignore": text or null}]}; stdout: for each group, [[i, j, similarity, leftCovered, leftTotal, rightCovered,
// rightTotal], ...] for every pair of its files (i, j: their positions in "files").
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
  const position = new Map(files.map((f, i) => [f.path, i]));
  out.push(report.allPairs().map(p => [position.get(p.leftFile.path), position.get(p.rightFile.path), p.similarity,
    p.leftCovered, p.leftTotal, p.rightCovered, p.rightTotal]));
}
process.stdout.write(JSON.stringify(out));
