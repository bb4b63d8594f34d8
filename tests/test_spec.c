/* Spec loading: presets overridden field by field, --set after the file,
 * sweeps as a cross product (last key fastest), every error collected. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "policy.h"
#include "spec_load.h"

int main(void) {
  amoe_diag d = {0};
  static amoe_experiment x;
  static amoe_spec s;
  const char *p = check_write_tmp("name: t\n"
                            "model: {preset: qwen3-30b-a3b, top_k: 4}\n"
                            "hardware: {preset: h200, h2d_bw: 5.5e10}\n"
                            "workload: {blocks: 10, tree: {nodes: 32}}\n"
                            "policies: [natural, {verifier: moe-spec, budget: 16}, {draft: ecospec, epsilon: 2}]\n"
                            "sweep: {offload.slots_per_layer: [16, 32], acceptance_model.kappa: [0, 0.1, 0.2]}\n");
  char *sets[] = {"workload.seed=7", "model.top_k=6"};
  CHECK(amoe_experiment_load(&x, p, sets, 2, &d) == AMOE_OK, "load: %s", d.n ? d.msgs[0] : "");
  CHECK(x.base.model.experts == 128 && x.base.model.top_k == 6 && x.base.model.hidden == 2048,
        "preset fields kept, top_k from --set over the file's override (%d)", x.base.model.top_k);
  CHECK(x.base.hw.h2d_bw == 5.5e10 && x.base.hw.hbm_bw == 4.3e12, "hardware override");
  CHECK(x.base.workload.seed == 7 && x.base.workload.nodes == 32 && x.base.workload.candidates == 32 &&
            x.base.workload.depth == 5 && x.base.workload.top_m == 32,
        "workload defaults and overrides");
  CHECK(x.base.npolicies == 3 && !strcmp(x.base.policies[1].label, "moe-spec/B=16") &&
            !strcmp(x.base.policies[2].label, "ecospec/acc=0.8/eps=2"),
        "policy rows and labels");
  CHECK(amoe_experiment_points(&x) == 6, "2 x 3 sweep points");
  CHECK(amoe_experiment_point(&x, 4, &s, &d) == AMOE_OK, "point 4");
  CHECK(s.offload.enabled && s.offload.slots_per_layer == 32 && s.kappa == 0.1, "point 4 = (32, 0.1): %d %g",
        s.offload.slots_per_layer, s.kappa);
  /* a spec without natural gets the baseline row added */
  CHECK(amoe_experiment_point(&x, 0, &s, &d) == AMOE_OK && s.npolicies == 3, "natural listed: no extra row");
  amoe_diag_free(&d);
  p = check_write_tmp("model: qwen3-30b-a3b\nhardware: h200\npolicies: [{verifier: acceptmoe}]\n");
  CHECK(amoe_experiment_load(&x, p, NULL, 0, &d) == AMOE_OK && x.base.npolicies == 2 && x.base.policies[1].implicit &&
            !strcmp(x.base.policies[1].label, "natural"),
        "the natural baseline is added");
  amoe_diag_free(&d);
  /* every error, each with a position */
  p = check_write_tmp("model: qwen3-30b-a3b\nhardware: h200\nworkload: {blocks: -3, tree: {depth: x}}\nwat: 1\n"
                "policies: [{verifier: moe-spec}]\n");
  CHECK(amoe_experiment_load(&x, p, NULL, 0, &d) == AMOE_EINVAL && d.n == 4, "four errors, got %d", d.n);
  for (int i = 0; i < d.n; i++) CHECK(strstr(d.msgs[i], p) && strchr(d.msgs[i] + strlen(p), ':'), "%s", d.msgs[i]);
  amoe_diag_free(&d);
  /* held routes: natural rows and stateless drafts, without offload; each refusal names the key's position */
  p = check_write_tmp("model: qwen3-30b-a3b\nhardware: h200\nworkload: {route_hold: 8}\n"
                      "policies: [natural, {draft: mtp, tokens: 2}]\n");
  CHECK(amoe_experiment_load(&x, p, NULL, 0, &d) == AMOE_OK && x.base.workload.route_hold == 8, "route_hold 8: %s",
        d.n ? d.msgs[0] : "");
  amoe_diag_free(&d);
  p = check_write_tmp("model: qwen3-30b-a3b\nhardware: h200\nworkload: {route_hold: 8}\n"
                      "offload: {slots_per_layer: 32}\npolicies: [natural, {verifier: acceptmoe}, {draft: ecospec}]\n");
  CHECK(amoe_experiment_load(&x, p, NULL, 0, &d) == AMOE_EINVAL && d.n == 3, "offload, acceptmoe and ecospec refused: %d",
        d.n);
  for (int i = 0; i < d.n; i++)
    CHECK(strstr(d.msgs[i], ":3:") && strstr(d.msgs[i], "workload.route_hold"), "%s", d.msgs[i]);
  amoe_diag_free(&d);
  remove(p);
  return check_done();
}
