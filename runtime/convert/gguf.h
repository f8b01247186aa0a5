// gguf.h — a validating reader of GGUF files (llama.cpp's model format, versions 2 and 3).
//
// The file is mmapped; keys, arrays and tensors are indexed at open, and every length, count
// and offset is checked against the file size, so a truncated or hostile file gives a one-line
// error instead of a crash. Values are returned as pointers into the mapping (no copies).
#ifndef ENTROPIX_GGUF_H
#define ENTROPIX_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12,
};

// ggml tensor types that may appear in a GGUF (numbers are ggml's).
enum ggml_type {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7,
    GGML_Q8_0 = 8, GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12,
    GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_Q8_K = 15, GGML_BF16 = 30,
};

typedef struct {
    const char *key;  size_t key_len;
    uint32_t type;                 // enum gguf_vtype
    const uint8_t *value;          // scalar: its bytes; string: the characters
    uint64_t str_len;              // GGUF_STRING
    uint32_t arr_type;             // GGUF_ARRAY: element type
    uint64_t arr_n;                // GGUF_ARRAY: element count
    const uint8_t **arr_strings;   // GGUF_ARRAY of strings: pointer to each element's chars
    const uint64_t *arr_str_lens;  //   and its length
} GGUFKV;

typedef struct {
    const char *name; size_t name_len;
    uint32_t type;                 // enum ggml_type
    uint32_t n_dims;
    uint64_t ne[4];                // ggml order: ne[0] is the contiguous (column) dimension
    const uint8_t *data;
    uint64_t nbytes;
} GGUFTensor;

typedef struct {
    void *map; size_t map_size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    GGUFKV *kv;
    GGUFTensor *tensors;
    uint64_t alignment;
    const char *path;
} GGUFFile;

// Returns 0, or -1 with a one-line reason in err (naming the file, the offset and the field).
int gguf_open(GGUFFile *f, const char *path, char *err, size_t errlen);
void gguf_close(GGUFFile *f);

const GGUFKV *gguf_find(const GGUFFile *f, const char *key);
const GGUFTensor *gguf_find_tensor(const GGUFFile *f, const char *name);
// Scalars of any integer/float type, converted; return 0 if found and convertible, else -1.
int gguf_get_i64(const GGUFFile *f, const char *key, int64_t *out);
int gguf_get_f64(const GGUFFile *f, const char *key, double *out);
// String value (not NUL-terminated) or NULL.
const char *gguf_get_str(const GGUFFile *f, const char *key, size_t *len);
// Array element as integer or float (numeric arrays), -1 if out of range / not numeric.
int gguf_arr_i64(const GGUFKV *kv, uint64_t i, int64_t *out);
int gguf_arr_f64(const GGUFKV *kv, uint64_t i, double *out);

// Elements per block and bytes per block of a ggml type; 0 if unknown to us.
uint64_t ggml_block_elems(uint32_t type);
uint64_t ggml_block_bytes(uint32_t type);
const char *ggml_type_name(uint32_t type);

#endif
