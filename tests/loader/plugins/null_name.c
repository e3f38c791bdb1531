/* tests/loader/plugins/null_name.c — BAD: a descriptor of the right size
 * and kind whose name is NULL; the loader must check before comparing. */
#include <sparkinfer/plugin.h>

static const struct si_model_ops ops = { .size = sizeof ops };

SI_PLUGIN_DEFINE(SI_KIND_MODEL, NULL, "0", "descriptor without a name", NULL, &ops, NULL)
