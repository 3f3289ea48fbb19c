/*
** rag_ids.c: the id table of the indexes (see rag_ids.h).
*/
#include "rag_ids.h"

#include <string.h>

#include "rag_fnv.h"
#include "rag_probe.h"

#define UNLINKED UINT32_MAX

void rag_ids_init(rag_ids *t) {
  memset(t, 0, sizeof *t);
}

void rag_ids_free(rag_ids *t) {
  rag_free(t->e);
  rag_free(t->pool);
  rag_free(t->table);
  rag_ids_init(t);
}

/* The key of slot e, for rag_probe_find. */
static const void *id_key(const void *ud, uint32_t e, size_t *len, uint32_t *hash) {
  const rag_ids *t = (const rag_ids *)ud;
  *len = t->e[e].len;
  *hash = t->e[e].hash;
  return t->pool + t->e[e].off;
}

/* The table position holding `id`, or the empty one where it would go. */
static size_t position(const rag_ids *t, const char *id, size_t n, uint32_t h) {
  return rag_probe_find(t->table, t->mask, id, n, h, id_key, t);
}

uint32_t rag_ids_find(const rag_ids *t, const char *id, size_t n) {
  uint32_t v;
  if (t->table == NULL) return RAG_IDS_NONE;
  v = t->table[position(t, id, n, rag_fnv32(id, n))];
  return v == 0 ? RAG_IDS_NONE : v - 1;
}

static void rehash(rag_ids *t) {
  size_t s;
  memset(t->table, 0, (t->mask + 1) * sizeof *t->table);
  for (s = 0; s < t->n; s++) {
    if (t->e[s].len == UNLINKED) continue;
    t->table[rag_probe_holding(t->table, t->mask, t->e[s].hash, 0)] = (uint32_t)s + 1;
  }
}

int rag_ids_reserve(rag_ids *t, size_t more, size_t bytes) {
  size_t need = t->n + more, cap = t->mask + 1;
  if (more > RAG_IDS_MAX - t->n || bytes > UINT32_MAX - 1 - t->poollen) return RAG_ETOOBIG;
  if (need > t->cap) {
    rag_ids_entry *e = (rag_ids_entry *)rag_grow(t->e, &t->cap, need, sizeof *e);
    if (e == NULL) return RAG_ENOMEM;
    t->e = e;
  }
  if (t->poollen + bytes + 1 > t->poolcap) {
    char *p = (char *)rag_grow(t->pool, &t->poolcap, t->poollen + bytes + 1, 1);
    if (p == NULL) return RAG_ENOMEM;
    t->pool = p;
  }
  if (t->table == NULL || need > cap / 2) {
    uint32_t *tab;
    if (t->table == NULL) cap = 16;
    while (need > cap / 2) cap *= 2;
    if (RAG_MUL_OVERFLOWS(cap, sizeof *tab) ||
        (tab = (uint32_t *)rag_malloc(cap * sizeof *tab)) == NULL)
      return RAG_ENOMEM;
    rag_free(t->table);
    t->table = tab;
    t->mask = cap - 1;
    rehash(t);
  }
  return RAG_OK;
}

uint32_t rag_ids_push(rag_ids *t, const char *id, size_t n) {
  uint32_t slot = (uint32_t)t->n++, h = rag_fnv32(id, n);
  rag_ids_entry *e = &t->e[slot];
  e->off = (uint32_t)t->poollen;
  e->len = (uint32_t)n;
  e->hash = h;
  if (n > 0) memcpy(t->pool + t->poollen, id, n);
  t->poollen += n;
  t->table[position(t, id, n, h)] = slot + 1;
  return slot;
}

uint32_t rag_ids_push_unlinked(rag_ids *t) {
  uint32_t slot = (uint32_t)t->n++;
  t->e[slot].off = 0;
  t->e[slot].len = UNLINKED;
  t->e[slot].hash = 0;
  return slot;
}

/* Empties table position i, moving later entries of its run back. */
static void delete_at(rag_ids *t, size_t i) {
  size_t j = i;
  for (;;) {
    size_t k;
    j = (j + 1) & t->mask;
    if (t->table[j] == 0) break;
    k = t->e[t->table[j] - 1].hash & t->mask;
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
    t->table[i] = t->table[j];
    i = j;
  }
  t->table[i] = 0;
}

/* The table position of a linked slot. */
static size_t position_of(const rag_ids *t, uint32_t slot) {
  return rag_probe_holding(t->table, t->mask, t->e[slot].hash, slot + 1);
}

void rag_ids_unlink(rag_ids *t, uint32_t slot) {
  rag_ids_entry *e = &t->e[slot];
  if (e->len == UNLINKED) return;
  delete_at(t, position_of(t, slot));
  t->waste += e->len;
  e->len = UNLINKED;
}

void rag_ids_swap_remove(rag_ids *t, uint32_t slot) {
  uint32_t last = (uint32_t)t->n - 1;
  rag_ids_unlink(t, slot);
  if (slot != last) {
    int linked = t->e[last].len != UNLINKED;
    if (linked) t->table[position_of(t, last)] = slot + 1;
    t->e[slot] = t->e[last];
  }
  t->n--;
}

void rag_ids_truncate(rag_ids *t, size_t n) {
  while (t->n > n) {
    rag_ids_unlink(t, (uint32_t)t->n - 1);
    t->n--;
  }
}

void rag_ids_compact(rag_ids *t, uint32_t *map) {
  size_t s, n = 0;
  for (s = 0; s < t->n; s++) {
    if (t->e[s].len == UNLINKED) {
      map[s] = RAG_IDS_NONE;
      continue;
    }
    map[s] = (uint32_t)n;
    t->e[n++] = t->e[s];
  }
  t->n = n;
  if (t->table != NULL) rehash(t);
  rag_ids_tidy(t);
}

void rag_ids_tidy(rag_ids *t) {
  char *p;
  size_t s, len = 0;
  if (t->waste * 2 <= t->poollen) return;
  p = (char *)rag_malloc(t->poollen - t->waste + 1);
  if (p == NULL) return;
  for (s = 0; s < t->n; s++) {
    rag_ids_entry *e = &t->e[s];
    if (e->len == UNLINKED) {
      e->off = 0;
      continue;
    }
    memcpy(p + len, t->pool + e->off, e->len);
    e->off = (uint32_t)len;
    len += e->len;
  }
  rag_free(t->pool);
  t->pool = p;
  t->poollen = len;
  t->poolcap = len + 1;
  t->waste = 0;
}

size_t rag_ids_mark(const rag_ids *t, const rag_id_filter *f, uint32_t *mark, uint32_t stamp,
                    uint32_t *slots) {
  size_t i, n = 0;
  for (i = 0; i < f->n; i++) {
    uint32_t s = rag_ids_find(t, f->ids[i], f->lens[i]);
    if (s == RAG_IDS_NONE || mark[s] == stamp) continue;
    mark[s] = stamp;
    if (slots != NULL) slots[n] = s;
    n++;
  }
  return n;
}

size_t rag_ids_memory(const rag_ids *t) {
  return t->cap * sizeof *t->e + t->poolcap + (t->table ? (t->mask + 1) * sizeof *t->table : 0);
}
