// source.c — the pieces every source reader shares: the tensor list and mapped files.
#include "runtime/convert/source.h"

#include "base/errmsg.h"
#include "runtime/convert/msg_esc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int src_add(ConvSource *s, const char *name, const char *src_name, uint32_t type, uint32_t ndim, uint64_t rows,
            uint64_t cols, const void *data, char *err, size_t errlen) {
    if (strlen(name) >= EMX_NAME_BYTES) {
        emx_seterr(err, errlen, "%s: tensor %s: name too long", s->path, ESC(src_name));
        return -1;
    }
    if (src_find(s, name)) {
        emx_seterr(err, errlen, "%s: tensor %s: appears twice (as %s)", s->path, ESC(src_name), name);
        return -1;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        SrcTensor *t = realloc(s->t, cap * sizeof *t);
        if (!t) {
            emx_seterr(err, errlen, "out of memory");
            return -1;
        }
        s->t = t;
        s->cap = cap;
    }
    SrcTensor *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    emx_esc(t->src_name, sizeof t->src_name, src_name);  // for messages: one line whatever the source holds
    t->type = type;
    t->ndim = ndim;
    t->rows = rows;
    t->cols = cols;
    t->data = data;
    return 0;
}

const SrcTensor *src_find(const ConvSource *s, const char *name) {
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0) return &s->t[i];
    return NULL;
}

const uint8_t *src_map_file(ConvSource *s, const char *path, size_t *size, char *err, size_t errlen) {
    if (s->n_maps == SRC_MAX_MAPS) {
        emx_seterr(err, errlen, "%s: more than %d files", path, SRC_MAX_MAPS);
        return NULL;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        emx_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size == 0) {
        emx_seterr(err, errlen, "%s: empty or unreadable file", path);
        close(fd);
        return NULL;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        emx_seterr(err, errlen, "%s: mmap failed: %s", path, strerror(errno));
        return NULL;
    }
    src_note_input(s, path);
    s->maps[s->n_maps] = p;
    s->map_sizes[s->n_maps++] = (size_t)st.st_size;
    *size = (size_t)st.st_size;
    return p;
}

void src_note_input(ConvSource *s, const char *path) {
    struct stat st;
    if (s->n_in == SRC_MAX_INPUTS || stat(path, &st) != 0) return;
    for (int i = 0; i < s->n_in; i++)
        if (s->in[i].dev == (uint64_t)st.st_dev && s->in[i].ino == (uint64_t)st.st_ino) return;
    char *copy = strdup(path);
    if (!copy) return;
    s->in[s->n_in].dev = (uint64_t)st.st_dev;
    s->in[s->n_in].ino = (uint64_t)st.st_ino;
    s->in[s->n_in++].path = copy;
}

void src_free(ConvSource *s) {
    for (int i = 0; i < s->n_in; i++) free(s->in[i].path);
    for (int i = 0; i < s->n_maps; i++) munmap(s->maps[i], s->map_sizes[i]);
    for (int i = 0; i < s->n_owned; i++) free(s->owned[i]);
    if (s->has_gguf) gguf_close(&s->gguf);
    tokdata_free(&s->tok);
    free(s->chat_template);
    free(s->t);
    memset(s, 0, sizeof *s);
}
