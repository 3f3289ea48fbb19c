/*
** rag_digest.h: content hashes for caches and dedup, computed by OpenSSL's
** libcrypto rather than by hand, and the CRC-32 that guards saved files.
*/
#ifndef RAG_DIGEST_H
#define RAG_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define RAG_DIGEST_SHA256_LEN 32

/*
** SHA-256 of `len` bytes at `data` (borrowed) into `out` (caller's 32
** bytes). Returns RAG_OK, or RAG_ENOMEM when libcrypto fails.
*/
int rag_digest_sha256(const void *data, size_t len, unsigned char out[RAG_DIGEST_SHA256_LEN]);

/*
** SHA-256 of n parts end to end, part i being len[i] bytes at data[i] (all
** borrowed), into `out`: what rag_digest_sha256 gives for their
** concatenation, without building it. RAG_OK or RAG_ENOMEM.
*/
int rag_digest_sha256_parts(const void *const *data, const size_t *len, size_t n,
                            unsigned char out[RAG_DIGEST_SHA256_LEN]);

/*
** Extends `crc` (0 to start) with the CRC-32 of `len` bytes at `data`: the
** ISO-HDLC polynomial of zlib, gzip and PNG, so crc32("123456789") is
** 0xcbf43926. Pure: no state between calls.
*/
uint32_t rag_digest_crc32(uint32_t crc, const void *data, size_t len);

#endif
