/* core/attach.c — offers loaded kernel plugins to the backend that was
 * opened (loader.h: si_registry_attach_kernels). */
#include <string.h>

#include "loader.h"

int si_registry_attach_kernels(const si_registry *r, const si_host *h, const char *backend,
                               const struct si_backend_ops *ops, si_backend *b, size_t *n_attached,
                               si_err *err)
{
    size_t n = 0;
    bool can = SI_HAS_MEMBER(ops, struct si_backend_ops, attach_kernel) && ops->attach_kernel != NULL;
    for (size_t i = 0; i < si_registry_count(r); i++) {
        const si_plugin_record *rec = si_registry_at(r, i);
        if (rec->state != SI_PLUGIN_LOADED || rec->kind != SI_KIND_KERNEL)
            continue;
        const struct si_kernel_ops *ko = rec->desc->ops;
        if (ko->backend == NULL || strcmp(ko->backend, backend) != 0) {
            h->log(h, SI_LOG_INFO, "core", "kernel %s is for backend %s, not %s: unused", rec->name,
                   ko->backend ? ko->backend : "?", backend);
            continue;
        }
        si_err kerr = { { 0 } };
        int rc = can ? ops->attach_kernel(b, rec->desc, rec->section, &kerr)
                     : si_err_set(&kerr, SI_EREFUSED, "backend %s takes no kernel plugins", backend);
        if (rc == SI_OK) {
            n++;
            h->log(h, SI_LOG_INFO, "core", "kernel %s attached to backend %s", rec->name, backend);
            continue;
        }
        if (rec->required) {
            if (n_attached != NULL)
                *n_attached = n;
            return si_err_set(err, rc, "[%s] is required: %s", rec->section, kerr.msg);
        }
        h->log(h, SI_LOG_WARN, "core", "kernel %s not attached: %s", rec->name, kerr.msg);
    }
    if (n_attached != NULL)
        *n_attached = n;
    return SI_OK;
}
