/* The serving scheduler (schedule.h). */
#include "schedule.h"

void amoe_sched_init(amoe_sched *s, amoe_sched_slot **slot, int B, double cap, int incremental, int apart) {
  s->slot = slot;
  s->apart = apart;
  s->B = B;
  s->cap = cap;
  s->used = 0;
  s->incremental = incremental;
  s->running = s->nheld = 0;
  s->seq = 0;
  for (int i = 0; i < B; i++) slot[i]->req = -1;
}

int amoe_sched_resume(amoe_sched *s, const double *committed) {
  if (s->nheld < 1) return -1;
  const int i = s->held[s->nheld - 1];
  amoe_sched_slot *x = s->slot[i];
  const double need = x->prompt + committed[i];
  if (s->running > 0 && s->used + need > s->cap) return -1;
  s->nheld--;
  x->paused = 0, x->kv = need, s->used += need, s->running++, x->admit_seq = s->seq++;
  return i;
}

int amoe_sched_fits(const amoe_sched *s, double need) {
  return !(s->cap > 0 && s->running > 0 && s->used + need > s->cap);
}

void amoe_sched_admit(amoe_sched *s, int i, int req, int prompt, double need) {
  amoe_sched_slot *x = s->slot[i];
  x->kv = need;
  s->used += need;
  s->running++;
  x->paused = x->preempted = 0, x->admit_seq = s->seq++;
  x->prompt = prompt;
  x->req = req;
}

void amoe_sched_running(const amoe_sched *s, int *act, int *na, int *pf, int *npf) {
  *na = *npf = 0;
  for (int i = 0; i < s->B; i++) {
    const amoe_sched_slot *x = s->slot[i];
    if (x->req >= 0 && !x->paused) {
      if (x->chunk < x->chunks) pf[(*npf)++] = i;
      else act[(*na)++] = i;
    }
  }
  if (s->apart && *npf > 0) *na = 0; /* a step of prompt chunks of its own; the decodes wait */
}

int amoe_sched_preempt(amoe_sched *s, int per) {
  int n = 0;
  for (;;) {
    int na = 0;
    for (int i = 0; i < s->B; i++)
      na += s->slot[i]->req >= 0 && !s->slot[i]->paused && s->slot[i]->chunk >= s->slot[i]->chunks;
    if (!(s->incremental && s->running > 1 && s->used + (double)na * per > s->cap)) return n;
    int v = -1;
    for (int i = 0; i < s->B; i++)
      if (s->slot[i]->req >= 0 && !s->slot[i]->paused && (v < 0 || s->slot[i]->admit_seq > s->slot[v]->admit_seq)) v = i;
    amoe_sched_slot *x = s->slot[v];
    x->paused = 1, x->preempted++, s->used -= x->kv, x->kv = 0, s->running--;
    x->chunk = x->chunks = 0; /* (a prompt it was prefilling is recomputed whole) */
    s->held[s->nheld++] = v;
    n++;
  }
}

int amoe_sched_budget(amoe_sched *s, int left, int c, int na, int *pf, int npf) {
  int kept = 0;
  for (int q = 1; q < npf; q++) /* first come first served: by request */
    for (int j = q; j > 0 && s->slot[pf[j]]->req < s->slot[pf[j - 1]]->req; j--) {
      const int t = pf[j];
      pf[j] = pf[j - 1];
      pf[j - 1] = t;
    }
  for (int q = 0; q < npf; q++) {
    amoe_sched_slot *x = s->slot[pf[q]];
    x->take = 0;
    for (int ch = x->chunk; ch < x->chunks; ch++) {
      const int n = (x->prompt < (ch + 1) * c ? x->prompt : (ch + 1) * c) - ch * c;
      if (n > left && !(na == 0 && kept == 0 && x->take == 0)) break;
      left -= n;
      x->take++;
    }
    if (x->take > 0) pf[kept++] = pf[q];
  }
  return kept;
}

void amoe_sched_wrote(amoe_sched *s, int i, double kv) {
  s->used += kv - s->slot[i]->kv;
  s->slot[i]->kv = kv;
}

void amoe_sched_release(amoe_sched *s, int i) {
  s->used -= s->slot[i]->kv;
  s->running--;
  s->slot[i]->req = -1;
}
