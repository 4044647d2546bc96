/* libh3nextb.so: the definition RTLD_NEXT from libh3nexta.so must find. */
__attribute__((visibility("default"))) int h3t_probe(void)
{
    return 2;
}
