/* What `acceptmoe cells` and the deployments' calibration (cells_fit.c)
 * share: a cell file's rows, the acceptance curves, and one round of
 * predictions for chosen rows. */
#ifndef AMOE_CELLS_INTERNAL_H
#define AMOE_CELLS_INTERNAL_H

#include "cells.h"
#include "results.h"

/* The columns; those from C_HOST on (the tier rows', docs/design.md §21)
 * may be absent from a file. */
enum { C_ID, C_SOURCE, C_GRADE, C_MODEL, C_HW, C_GPUS, C_TP, C_EP, C_ENGINE, C_WEIGHTS, C_DRAFT, C_K, C_AL, C_ISL,
       C_OSL, C_LENGTHS, C_LOAD, C_REQUESTS, C_METRIC, C_VALUE, C_HOST, C_LINK, C_EXPERTS, C_SSD, C_NOTE, NCOLS };
#define C_REQUIRED C_HOST

#define FIELD_MAX 512
typedef struct {
  char f[NCOLS][FIELD_MAX];
  int line;
  int gpus, tp, ep, k, requests, isl, osl; /* -1: not stated (gpus, tp, ep); isl, osl 0: a dataset's */
  int sockets;            /* the host column's *N (1 without) */
  double al, value;
  int metric, draft;
  int ok;                 /* predicted (else skipped: why) */
  char why[256];          /* the reason it is skipped */
  char note[256];         /* what its run stands on beyond the cell (a stand-in, a curve) */
  double predicted;       /* by the presets alone */
  double calibrated;      /* with its deployment calibrated (NAN: not) */
  /* a closed loop's clients by Little's law over its run (NAN: not one):
   * requests per second (output tokens / s over the row's output length)
   * times a request's mean latency (TTFT + (output - 1) TPOT) */
  double little;
  int run;                /* its run in the presets' round (rows that share one share it; -1: none) */
} cell;

typedef struct {
  cell *rows;
  int n, cap;
} cell_file;

typedef struct {
  char name[64], model[64], draft[32], mode[32];
  double al[8];
} curve;


/* A cell file open for predictions: its rows, the curves, the folder the
 * runs go to (each round in its own), and the options. */
typedef struct {
  const amoe_cells_opts *o;
  cell_file cf;
  curve *cv;
  int ncv;
  char base[AMOE_PATH_MAX];
  int made_tmp, round;
} cells_ctx;

amoe_status cells_open(cells_ctx *x, const amoe_cells_opts *o, amoe_err *e);
void cells_close(cells_ctx *x);
/* One round: the rows with pick[i], each with its own overrides and the
 * `nextra` more of extra, run (rows that share a run share it) into pred[i]
 * (NAN: the row cannot run, or its run failed; with `record`, the row's why
 * says which, and the run's progress goes to stderr unless quiet). */
amoe_status cells_predict(cells_ctx *x, const unsigned char *pick, char *const *extra, int nextra, double *pred,
                          int record, amoe_err *e);
/* The row's deployment (model, hardware, GPUs, layout, engine, weights). */
void cells_deployment_key(const cell *c, char *out, size_t n);
/* The row's on-off partner key: its deployment and load without the draft. */
void cells_base_key(const cell *c, char *out, size_t n);
/* The off row whose measurement row i's speculation is over (the same
 * deployment and load, draft none, both predicted), or -1. */
int cells_partner(const cell_file *cf, int i);
/* cells --calibrated: each deployment of the predicted rows fitted to its
 * speculation-off rows (cells_fit.c), every row of it predicted again, and
 * the report of both (the rows' calibrated). */
amoe_status cells_calibrated(cells_ctx *x, FILE *out, amoe_err *e);
/* The model's weight format a cell's weights column names (NULL: none of the format's). */
const char *cells_weight_format(const char *weights);
/* The NVLink of the hardware where its preset names none (NULL: none). */
const char *cells_default_link(const char *hw);
/* 1 when id is one of the comma-separated ids (only NULL: every id). */
int cells_wanted(const char *only, const char *id);

#endif
