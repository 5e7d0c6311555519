/* SSD entry header checks (see hm_entry.h). */
#include "hm_entry.h"

#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the on-disk format is little endian; this file reads it in host order"
#endif

#define ENTRY_MAGIC 0x454B4348u /* b"HCKE" */
#define FORMAT_VERSION 1u
#define FLAG_DEAD 1u
#define FIXED 48u /* the hashed fixed header; its xxh3 follows, then the key */
#define KEY_AT (FIXED + 8u)

static uint16_t load16(const char *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t load32(const char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t load64(const char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void store16(char *p, uint16_t v) { memcpy(p, &v, sizeof v); }
static void store32(char *p, uint32_t v) { memcpy(p, &v, sizeof v); }
static void store64(char *p, uint64_t v) { memcpy(p, &v, sizeof v); }

void hm_entry_pack(char *block, const char *key, uint64_t klen, uint64_t plen, uint64_t seq, uint64_t gen,
                   uint64_t payload_hash, hm_xxh3_fn xxh3) {
    memset(block, 0, HM_ENTRY_BLOCK);
    store32(block, ENTRY_MAGIC);
    store16(block + 4, FORMAT_VERSION);
    store32(block + 8, (uint32_t)klen);
    store64(block + 16, plen);
    store64(block + 24, seq);
    store64(block + 32, gen);
    store64(block + 40, payload_hash);
    memcpy(block + KEY_AT, key, (size_t)klen);
    /* The header's hash covers the fixed part and the key, which do not lie back to back. */
    char hashed[HM_ENTRY_BLOCK];
    memcpy(hashed, block, FIXED);
    memcpy(hashed + FIXED, key, (size_t)klen);
    store64(block + FIXED, xxh3(hashed, (size_t)(FIXED + klen)));
}

int hm_entry_check(const char *entry, uint64_t avail, const char *key, uint64_t klen, uint64_t plen, uint64_t gen,
                   uint64_t seq, uint64_t max_key, hm_xxh3_fn xxh3) {
    if (avail < HM_ENTRY_BLOCK || avail - HM_ENTRY_BLOCK < plen)
        return HM_ENTRY_SHORT;
    if (load32(entry) != ENTRY_MAGIC)
        return HM_ENTRY_BAD_HEADER;
    uint64_t kl = load32(entry + 8);
    if (kl > max_key || kl > HM_ENTRY_BLOCK - KEY_AT)
        return HM_ENTRY_BAD_HEADER;
    /* The header's hash covers the fixed part and the key, which do not lie back to back. */
    char hashed[HM_ENTRY_BLOCK];
    memcpy(hashed, entry, FIXED);
    memcpy(hashed + FIXED, entry + KEY_AT, (size_t)kl);
    if (xxh3(hashed, (size_t)(FIXED + kl)) != load64(entry + FIXED))
        return HM_ENTRY_BAD_HEADER;
    if (load16(entry + 4) != FORMAT_VERSION)
        return HM_ENTRY_BAD_HEADER;
    if ((load16(entry + 6) & FLAG_DEAD) || load64(entry + 32) != gen || load64(entry + 24) != seq ||
        load64(entry + 16) != plen)
        return HM_ENTRY_STALE;
    if (kl != klen || memcmp(entry + KEY_AT, key, (size_t)kl) != 0)
        return HM_ENTRY_OTHER_KEY;
    if (xxh3(entry + HM_ENTRY_BLOCK, (size_t)plen) != load64(entry + 40))
        return HM_ENTRY_BAD_PAYLOAD;
    return HM_ENTRY_OK;
}
