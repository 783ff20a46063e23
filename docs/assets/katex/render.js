// Typesets the formulas that pymdownx.arithmatex (generic mode) leaves as \( \) and \[ \] in the page, with the KaTeX
// served beside it (docs/assets/katex: katex 0.19.1 from npm, MIT, fonts as woff2 only), so no formula needs a CDN.
// document$ is mkdocs-material's page observable: it fires on the first load and on every instant navigation.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
