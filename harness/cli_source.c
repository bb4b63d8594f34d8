/* Traces named on the command line (cli.h): a file as a source, a source
 * written as a trace. */
#include "cli.h"

#include <string.h>

#include "jsonl.h"
#include "source.h"
#include "trace.h"

int cli_source_of_format(const char *format) {
  static const int files[] = {AMOE_SRC_BLOCKS_JSONL, AMOE_SRC_ROUTING_JSONL, AMOE_SRC_ROUTING_SAFETENSORS};
  for (size_t i = 0; format && i < sizeof files / sizeof files[0]; i++)
    if (!strcmp(format, amoe_source_kind_names[files[i]])) return files[i];
  return -1;
}

int cli_file_source(const cli_opts *o, amoe_spec *s, amoe_source **src, amoe_err *e) {
  amoe_spec_defaults(s);
  s->workload.blocks = 0; /* the whole file */
  snprintf(s->workload.path, sizeof s->workload.path, "%s", o->input);
  if (o->window) s->workload.window = o->window;
  if (o->hybrid) s->workload.routing_blocks = AMOE_ROUTING_HYBRID;
  if (amoe_trace_sniff(o->input)) {
    amoe_trace_reader *r;
    amoe_status st = amoe_trace_open(&r, o->input, e);
    if (st) return cli_report(st, e);
    const amoe_trace_info *ti = amoe_trace_info_of(r);
    snprintf(s->model.name, sizeof s->model.name, "trace");
    s->model.layers = s->model.moe_layers = ti->layers;
    s->model.experts = ti->experts;
    s->model.top_k = ti->top_k;
    amoe_trace_close_reader(r);
    s->workload.source = AMOE_SRC_TRACE;
  } else {
    if (!o->format || !o->model)
      return cli_usage_error("%s is not an .amt trace: give --format blocks-jsonl|routing-jsonl|routing-safetensors and "
                             "--model PRESET", o->input);
    const int src_kind = cli_source_of_format(o->format);
    if (src_kind < 0) return cli_usage_error("unknown --format '%s' (blocks-jsonl, routing-jsonl, routing-safetensors)", o->format);
    s->workload.source = src_kind;
    if (o->hybrid && s->workload.source != AMOE_SRC_ROUTING_JSONL && s->workload.source != AMOE_SRC_ROUTING_SAFETENSORS)
      return cli_usage_error("--hybrid applies to --format routing-jsonl%s", "");
    amoe_diag d = {0};
    int ok = amoe_spec_load_preset(s, 0, o->model, "--model", &d) == AMOE_OK;
    amoe_diag_print(&d, stderr);
    amoe_diag_free(&d);
    if (!ok) return CLI_EXIT_USAGE;
  }
  amoe_status st = amoe_source_open(src, &s->workload, &s->model, e);
  return st ? cli_report(st, e) : 0;
}

amoe_status cli_write_source(amoe_source *src, const amoe_model *m, const char *out, int quiet, amoe_err *e) {
  cli_progress pg = cli_progress_start(quiet);
  size_t n = strlen(out);
  int jsonl = n > 6 && !strcmp(out + n - 6, ".jsonl");
  amoe_block b;
  amoe_block_init(&b, m->moe_layers, m->experts, amoe_source_m(src));
  amoe_status st = AMOE_OK, rc;
  long count = 0;
  if (jsonl) {
    amoe_afile a;
    st = amoe_afile_open(&a, out, e);
    while (!st && (rc = amoe_source_next(src, &b, e)) != AMOE_END) {
      if (rc) st = rc;
      else st = amoe_blocks_jsonl_write(a.f, &b, e), count++;
      if (!st && amoe_interrupt) st = AMOE_EINTR;
      cli_progress_blocks(&pg, count, out);
    }
    if (!st) st = amoe_afile_commit(&a, e);
    amoe_afile_abort(&a);
  } else {
    amoe_trace_writer *w;
    st = amoe_trace_create(&w, out, m->moe_layers, m->experts, m->top_k, amoe_source_m(src),
                           amoe_source_provenance(src), e);
    while (!st && (rc = amoe_source_next(src, &b, e)) != AMOE_END) {
      if (rc) st = rc;
      else st = amoe_trace_write(w, &b, e), count++;
      if (!st && amoe_interrupt) st = AMOE_EINTR;
      cli_progress_blocks(&pg, count, out);
    }
    if (!st) st = amoe_trace_close(w, e);
    else if (w) amoe_trace_abort(w);
  }
  amoe_block_free(&b);
  cli_progress_end(&pg);
  if (!st && !quiet) fprintf(stderr, "wrote %ld blocks to %s\n", count, out);
  return st;
}
