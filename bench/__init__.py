"""`attnlab bench`, the benchmark: tooling on top of every layer (it may import model, analysis and app;
nothing imports it). `runner` schedules the jobs, each in its own process (`worker`, with `forward` and
`meter`); `specs` names the modes, lengths and models; `payload` runs the real pages through AppTest;
`targets` judges the issue's targets; `tables` renders markdown; `report` ties a whole run together. The
JSON's schema lives in analysis.machinery.bench_report."""
