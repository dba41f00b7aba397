"""Schema inference (`run_pipeline.py infer-schema`): sample a source, guess each feature,
write a schema YAML whose guesses carry `# review:` comments.

- `etl.tools.infer.sample`: the first records of each input, through the project's own readers
  (byte ranges for text formats, one block for binary ones), so what is guessed from is exactly
  what a run would read;
- `etl.tools.infer.examples`: TFRecord files of tf.train.Example, framed by etl.formats.tfrecord and decoded
  by tfx_bsl (no TensorFlow import) into one Arrow list column per feature key;
- `etl.tools.infer.dialect`: a CSV file's encoding, delimiter and header row, sniffed from its
  first 64 KiB (the job names them);
- `etl.tools.infer.values`: null markers, dates and times, thousands separators in text cells;
- `etl.tools.infer.guess`: one column of the sample -> a feature spec and its review notes;
- `etl.tools.infer.render`: the schema (and job) YAML with comments, checked by `etl.contract.schema` before
  anything is written;
- `etl.tools.infer.checks`: `--checks`, a proposed `checks:` block (quality gates) for the job
  file from what the sample held (ranges with a margin, missing and NaN fractions, classes);
- `etl.tools.infer.summary`: the one summary of what was decided and why;
- `etl.tools.infer.command.command`: the CLI entry.
"""
