/* The serving scheduler (sim/engine/schedule.h) and the closed loop's sends
 * (sim/workload/arrival.h) by hand, without running a pass: admission under
 * a reserved KV capacity, incremental preemption (the newest first) and the
 * order of return (the last preempted first), the token budget over prompt
 * chunks, and a closed loop's arrivals. */
#include <math.h>
#include <stdio.h>

#include "arrival.h"
#include "check.h"
#include "schedule.h"

static amoe_sched_slot slot[4];
static amoe_sched_slot *qs[4] = {&slot[0], &slot[1], &slot[2], &slot[3]};

static void admission(void) {
  amoe_sched s;
  amoe_sched_init(&s, qs, 4, 10, 0, 0);
  CHECK(slot[0].req == -1 && slot[3].req == -1 && s.running == 0, "every slot free");
  CHECK(amoe_sched_fits(&s, 16), "alone, a request is admitted whatever its KV");
  amoe_sched_admit(&s, 0, 0, 4, 8); /* 4 prompt + 4 output reserved */
  CHECK(!amoe_sched_fits(&s, 8) && amoe_sched_fits(&s, 2), "8 + 8 > 10 waits, 8 + 2 fits (used %g)", s.used);
  amoe_sched_release(&s, 0);
  CHECK(slot[0].req == -1 && s.used == 0 && s.running == 0 && amoe_sched_fits(&s, 8), "released: its KV back");
  amoe_sched s2;
  amoe_sched_init(&s2, qs, 4, 0, 0, 0); /* no capacity: every request fits */
  amoe_sched_admit(&s2, 0, 0, 4, 1e9);
  CHECK(amoe_sched_fits(&s2, 1e9), "unbounded KV: admitted regardless");
}

static void preemption(void) {
  amoe_sched s;
  amoe_sched_init(&s, qs, 4, 10, 1, 0);
  for (int i = 0; i < 3; i++) amoe_sched_admit(&s, i, i, 3, 3); /* three decoding requests of 3 KV tokens */
  /* one token each: 9 + 3 > 10, so the newest (slot 2) goes; 6 + 2 fits */
  CHECK(amoe_sched_preempt(&s, 1) == 1 && slot[2].paused && slot[2].kv == 0 && slot[2].preempted == 1 &&
            s.used == 6 && s.running == 2 && s.nheld == 1,
        "one preempted, the newest: slot 2 (used %g, running %d)", s.used, s.running);
  int act[4], pf[4], na, npf;
  amoe_sched_running(&s, act, &na, pf, &npf);
  CHECK(na == 2 && act[0] == 0 && act[1] == 1 && npf == 0, "slots 0 and 1 decode");
  /* three tokens each: 6 + 6 > 10: slot 1 goes; then 3 + 3 fits */
  CHECK(amoe_sched_preempt(&s, 3) == 1 && slot[1].paused && s.used == 3 && s.nheld == 2, "then slot 1 (used %g)", s.used);
  CHECK(amoe_sched_preempt(&s, 100) == 0, "one running request is never preempted");
  /* the last preempted returns first: slot 1's prompt and its 2 tokens, 5 */
  const double committed[4] = {4, 2, 1, 0};
  CHECK(amoe_sched_resume(&s, committed) == 1 && !slot[1].paused && slot[1].kv == 5 && s.used == 8 &&
            slot[1].admit_seq > slot[0].admit_seq,
        "slot 1 returns first, holding 3 + 2 (used %g)", s.used);
  CHECK(amoe_sched_resume(&s, committed) == -1 && s.nheld == 1, "slot 2 (3 + 1) does not fit beside 8");
  amoe_sched_wrote(&s, 0, 4);
  CHECK(s.used == 9 && slot[0].kv == 4, "slot 0 wrote a token (used %g)", s.used);
  amoe_sched_release(&s, 0);
  amoe_sched_release(&s, 1);
  CHECK(amoe_sched_resume(&s, committed) == 2 && s.used == 4 && s.running == 1, "with nothing running, slot 2 returns");
}

static void budget(void) {
  amoe_sched s;
  amoe_sched_init(&s, qs, 4, 0, 0, 0);
  amoe_sched_admit(&s, 0, 1, 10, 0); /* request 1 in slot 0, request 0 in slot 1: 10-token prompts, chunks of 4 */
  amoe_sched_admit(&s, 1, 0, 10, 0);
  for (int i = 0; i < 2; i++) slot[i].chunk = 0, slot[i].chunks = 3;
  int pf[2] = {0, 1};
  /* 12 tokens left after one decode: request 0 first, 4 + 4 + 2; request 1's 4 do not fit in 2 */
  CHECK(amoe_sched_budget(&s, 12, 4, 1, pf, 2) == 1 && pf[0] == 1 && slot[1].take == 3 && slot[0].take == 0,
        "request 0's three chunks run, request 1's none (takes %d, %d)", slot[1].take, slot[0].take);
  int pf2[2] = {0, 1};
  CHECK(amoe_sched_budget(&s, 2, 4, 0, pf2, 2) == 1 && pf2[0] == 1 && slot[1].take == 1,
        "nothing decoding: the first prompt runs one chunk over the budget");
  slot[1].chunk = 2; /* its last chunk is 2 tokens */
  int pf3[2] = {1, 0};
  CHECK(amoe_sched_budget(&s, 6, 4, 1, pf3, 2) == 2 && slot[1].take == 1 && slot[0].take == 1,
        "a last chunk of 2, then one of 4 (takes %d, %d)", slot[1].take, slot[0].take);
}

/* engine.prefill_apart: a step of prompt chunks alone while one waits, the
 * decodes after; without it, both in one step. */
static void apart(void) {
  for (int a = 0; a < 2; a++) {
    amoe_sched s;
    amoe_sched_init(&s, qs, 4, 0, 0, a);
    amoe_sched_admit(&s, 0, 0, 8, 0);
    amoe_sched_admit(&s, 1, 1, 8, 0);
    slot[0].chunk = slot[0].chunks = 1; /* request 0 decoding, request 1 prefilling */
    slot[1].chunk = 0, slot[1].chunks = 2;
    int act[4], pf[4], na, npf;
    amoe_sched_running(&s, act, &na, pf, &npf);
    CHECK(npf == 1 && pf[0] == 1 && na == (a ? 0 : 1), "apart %d: %d decoding beside the prompt chunk", a, na);
    slot[1].chunk = 2; /* its prompt done: it decodes too */
    amoe_sched_running(&s, act, &na, pf, &npf);
    CHECK(npf == 0 && na == 2 && act[0] == 0 && act[1] == 1, "apart %d: no chunk waiting, both decode", a);
  }
}

static void closed_loop(void) {
  amoe_arrival plan[5];
  for (int i = 0; i < 5; i++) plan[i] = (amoe_arrival){-1, 8, 4};
  amoe_closed_loop lp = {0};
  amoe_arrival_sent(&lp, 1); /* no loop: nothing */
  amoe_arrival_loop_start(&lp, plan, 5, 2);
  CHECK(plan[0].arrival_s == 0 && plan[1].arrival_s == 0 && isinf(plan[2].arrival_s) && isinf(plan[4].arrival_s),
        "two clients: requests 0 and 1 at once, the rest unsent");
  amoe_arrival_sent(&lp, 1.5);
  amoe_arrival_sent(&lp, 2.0);
  amoe_arrival_sent(&lp, 3.0);
  amoe_arrival_sent(&lp, 4.0); /* every request sent: nothing more */
  CHECK(plan[2].arrival_s == 1.5 && plan[3].arrival_s == 2.0 && plan[4].arrival_s == 3.0 && lp.sent == 5,
        "each end sends the next: %g %g %g", plan[2].arrival_s, plan[3].arrival_s, plan[4].arrival_s);
  amoe_arrival_loop_start(&lp, plan, 5, 8);
  CHECK(lp.sent == 5 && plan[4].arrival_s == 0, "more clients than requests: every request at once");
}

int main(void) {
  admission();
  preemption();
  budget();
  apart();
  closed_loop();
  printf("%d passed, %d failed\n", check_pass, check_fail);
  return check_fail ? 1 : 0;
}
