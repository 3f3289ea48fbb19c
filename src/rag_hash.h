/*
** rag_hash.h: content hashes for caches and dedup, computed by OpenSSL's
** libcrypto rather than by hand.
*/
#ifndef RAG_HASH_H
#define RAG_HASH_H

#include <stddef.h>

#define RAG_SHA256_LEN 32

/*
** SHA-256 of `len` bytes at `data` (borrowed) into `out` (caller's 32
** bytes). Returns RAG_OK, or RAG_ENOMEM when libcrypto fails.
*/
int rag_hash_sha256(const void *data, size_t len, unsigned char out[RAG_SHA256_LEN]);

#endif
