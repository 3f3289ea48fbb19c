/*
** rag_eval.h: IR measures of a ranked run against graded judgements, with
** trec_eval's definitions (nDCG@k, Recall@k, P@k, MRR, MAP, Success@k), per
** query and averaged. A run is taken in the order given (no re-sorting by
** score); a document repeated in a run counts once, at its first position.
** Everything is borrowed for the call; the caller owns the output arrays.
*/
#ifndef RAG_EVAL_H
#define RAG_EVAL_H

#include <stddef.h>

#include "rag.h"

/* Longest cutoff a measure name may carry. */
#define RAG_EVAL_MAX_K 1000000000u

typedef enum rag_eval_kind {
  RAG_EVAL_NDCG,    /* "ndcg[@k]"    trec_eval ndcg_cut_k (ndcg without k) */
  RAG_EVAL_RECALL,  /* "recall[@k]"  recall_k */
  RAG_EVAL_P,       /* "p@k"         P_k */
  RAG_EVAL_MRR,     /* "mrr[@k]"     recip_rank, cut at k */
  RAG_EVAL_MAP,     /* "map[@k]"     map_cut_k (map without k) */
  RAG_EVAL_SUCCESS  /* "success@k"   success_k */
} rag_eval_kind;

typedef struct rag_eval_measure {
  rag_eval_kind kind;
  size_t k; /* cutoff; 0: the whole run */
} rag_eval_measure;

/*
** Parses a measure name of len bytes (lowercase, as listed above; k is
** 1..RAG_EVAL_MAX_K in decimal digits) into *out. RAG_EINVAL when the name
** is unknown; RAG_EFORMAT when the name is known but its k is missing (p,
** success), empty, zero, too large or not digits.
*/
int rag_eval_parse(const char *s, size_t len, rag_eval_measure *out);

/*
** One query: its id, the run's ids in rank order, and its judgements (ndocs
** documents with finite grades; grades > 0 are nDCG gains, grades >= level
** make a document relevant for the other measures; unjudged is grade 0).
*/
typedef struct rag_eval_query {
  const char *id;
  size_t idlen;
  const char *const *run;
  const size_t *runlens;
  size_t nrun;
  const char *const *docs;
  const size_t *doclens;
  const double *grades;
  size_t ndocs;
} rag_eval_query;

/*
** Evaluates nq queries on nm measures. OUT: per[i * nm + j], measure j of
** query i (queries in the order given); mean[j], the mean of measure j over
** the nq queries (0 when nq is 0), summed in ascending id order (bytewise)
** so it never depends on the order of q. Returns RAG_OK; RAG_ENOMEM; or
** RAG_EINVAL, *bad set to the query index when a query judges a document
** twice or gives a grade that is not finite, or to nq when level is not a
** finite number > 0 (per and mean are then undefined); RAG_ETOOBIG when a
** size overflows.
*/
int rag_eval_ir(const rag_eval_query *q, size_t nq, const rag_eval_measure *m, size_t nm,
                double level, double *per, double *mean, size_t *bad);

#endif
