package org.scalelab.testcluster;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.Groups;

/**
 * The test cluster's Kerberos: a KDC (Hadoop's {@link MiniKdc}) in this JVM, a principal and a
 * keytab for each party, and the settings of a secure HDFS.
 *
 * <pre>
 * TestCluster ... --kerberos [--students alice,bob] [--hub-principal scalelab]
 * </pre>
 *
 * <p>Principals, in the realm {@code SCALELAB.TEST}, each with its own keytab under {@code
 * <conf-dir>/keytabs/}: {@code hdfs/localhost} (the namenode and the datanode, so {@code hdfs} is
 * the HDFS superuser), {@code HTTP/localhost} (WebHDFS's SPNEGO, in {@code hdfs.keytab} too),
 * the hub ({@code scalelab}: a member of the superuser group, through Hadoop's static group
 * mapping, and allowed to impersonate anyone, {@code hadoop.proxyuser.scalelab.*}), and one
 * per student ({@code alice}), whose short name is the HDFS user. The KDC listens on TCP on
 * 127.0.0.1 (a free port); {@code <conf-dir>/krb5.conf} is the clients' {@code KRB5_CONFIG}.
 *
 * <p>HDFS: {@code hadoop.security.authentication = kerberos}, block access tokens, and SASL
 * on the data transfer protocol ({@code dfs.data.transfer.protection = authentication}) and
 * HTTPS only ({@code dfs.http.policy = HTTPS_ONLY}), as a secure datanode on unprivileged ports
 * must have them: the namenode's and the datanode's web servers (WebHDFS, SPNEGO) serve a
 * self-signed certificate for {@code localhost} and {@code 127.0.0.1}, whose PEM ({@code
 * <conf-dir>/tls/ca.pem}) clients trust. Tickets may be as
 * short as one second ({@code kinit -l 2s}), for the tests of an expired ticket.
 */
final class SecureSetup {

  /** The options this class takes out of the command line: flags, and options with a value. */
  static final List<String> FLAGS = List.of("--kerberos");
  static final List<String> OPTIONS = List.of("--students", "--hub-principal");

  static final String REALM_ORG = "SCALELAB";
  static final String REALM_DOMAIN = "TEST";
  /** The service principals' host: what the namenode names itself as to a client (serverId). */
  static final String SERVICE_HOST = "localhost";
  /** The keystores' password: a test cluster's, on loopback. */
  static final String TLS_PASSWORD = "scalelab-test";

  private final MiniKdc kdc;
  private final File keytabDir;
  private final File krb5Conf;
  private final String hub;
  private final List<String> students;
  private final File tlsDir;
  /** Short name (hdfs, HTTP, scalelab, alice, ...) -> {principal, keytab}. */
  private final Map<String, String[]> principals = new LinkedHashMap<>();

  private SecureSetup(MiniKdc kdc, File confDir, String hub, List<String> students) {
    this.kdc = kdc;
    this.keytabDir = new File(confDir, "keytabs");
    this.krb5Conf = new File(confDir, "krb5.conf");
    this.tlsDir = new File(confDir, "tls");
    this.hub = hub;
    this.students = students;
  }

  /**
   * Take this class's options out of {@code args}: they go into {@code into} ({@code --kerberos}
   * with the value "true"); the rest is returned, in order. Null when an option lacks its value.
   */
  static String[] takeOptions(String[] args, Map<String, String> into) {
    List<String> rest = new ArrayList<>();
    for (int i = 0; i < args.length; i++) {
      if (FLAGS.contains(args[i])) {
        into.put(args[i], "true");
      } else if (OPTIONS.contains(args[i])) {
        if (i + 1 >= args.length) {
          return null;
        }
        into.put(args[i], args[++i]);
      } else {
        rest.add(args[i]);
      }
    }
    return rest.toArray(new String[0]);
  }

  /** Whether {@code options} (from {@link #takeOptions}) ask for a secure cluster. */
  static boolean asked(Map<String, String> options) {
    return options.containsKey("--kerberos");
  }

  /**
   * Start the KDC (its data under {@code workDir}) and make every principal and keytab; null
   * when {@code options} has no {@code --kerberos}. Must run before anything in this JVM asks
   * Hadoop for a user ({@code UserGroupInformation}), which reads the default realm once.
   */
  static SecureSetup startIfAsked(Map<String, String> options, File workDir, File confDir)
      throws Exception {
    if (!asked(options)) {
      return null;
    }
    List<String> students = new ArrayList<>();
    for (String name : options.getOrDefault("--students", "").split(",")) {
      if (!name.isBlank()) {
        students.add(name.trim());
      }
    }
    String hub = options.getOrDefault("--hub-principal", "scalelab");
    Properties conf = MiniKdc.createConf();
    conf.setProperty(MiniKdc.ORG_NAME, REALM_ORG);
    conf.setProperty(MiniKdc.ORG_DOMAIN, REALM_DOMAIN);
    conf.setProperty(MiniKdc.KDC_BIND_ADDRESS, "127.0.0.1");
    conf.setProperty(MiniKdc.KDC_PORT, "0");
    conf.setProperty(MiniKdc.TRANSPORT, "TCP");
    conf.setProperty(MiniKdc.MIN_TICKET_LIFETIME, "1"); // seconds: kinit -l 2s for the tests
    File kdcDir = new File(workDir, "kdc");
    if (!kdcDir.isDirectory() && !kdcDir.mkdirs()) {
      throw new IOException("cannot create " + kdcDir);
    }
    MiniKdc kdc = new MiniKdc(conf, kdcDir);
    kdc.start();
    SecureSetup setup = new SecureSetup(kdc, confDir, hub, students);
    setup.createPrincipals();
    setup.writeKrb5Conf();
    setup.createTls();
    return setup;
  }

  private void createPrincipals() throws Exception {
    if (!keytabDir.isDirectory() && !keytabDir.mkdirs()) {
      throw new IOException("cannot create " + keytabDir);
    }
    // The services share one keytab, as on a small cluster's namenode host.
    File service = new File(keytabDir, "hdfs.keytab");
    kdc.createPrincipal(service, "hdfs/" + SERVICE_HOST, "HTTP/" + SERVICE_HOST);
    principals.put("hdfs", new String[] {qualified("hdfs/" + SERVICE_HOST), service.getPath()});
    principals.put("HTTP", new String[] {qualified("HTTP/" + SERVICE_HOST), service.getPath()});
    List<String> users = new ArrayList<>();
    users.add(hub);
    users.addAll(students);
    for (String user : users) {
      File keytab = new File(keytabDir, user + ".keytab");
      kdc.createPrincipal(keytab, user);
      principals.put(user, new String[] {qualified(user), keytab.getPath()});
    }
  }

  /** The clients' krb5.conf: the KDC on 127.0.0.1 over TCP, no DNS. */
  private void writeKrb5Conf() throws IOException {
    String realm = kdc.getRealm();
    String text =
        "# Written by ScaleLab's test cluster (SecureSetup): KRB5_CONFIG for its clients.\n"
            + "[libdefaults]\n"
            + "  default_realm = " + realm + "\n"
            + "  dns_lookup_realm = false\n"
            + "  dns_lookup_kdc = false\n"
            + "  udp_preference_limit = 1\n"
            + "  forwardable = true\n"
            + "[realms]\n"
            + "  " + realm + " = {\n"
            + "    kdc = 127.0.0.1:" + kdc.getPort() + "\n"
            + "  }\n"
            + "[domain_realm]\n"
            + "  localhost = " + realm + "\n"
            + "  127.0.0.1 = " + realm + "\n";
    Files.writeString(krb5Conf.toPath(), text, StandardCharsets.UTF_8);
  }

  private String qualified(String name) {
    return name + "@" + kdc.getRealm();
  }

  /**
   * A key pair and a self-signed certificate for {@code localhost} and {@code 127.0.0.1}
   * (JDK's keytool), in {@code tls/server.jks}, {@code tls/truststore.jks} and, for Python's
   * clients (requests' {@code verify}), {@code tls/ca.pem}; {@code tls/ssl-server.xml} and
   * {@code ssl-client.xml} name them, and Hadoop reads those from the class path: {@code tls/}
   * joins this thread's context class loader, which the threads it starts inherit.
   */
  private void createTls() throws Exception {
    if (!tlsDir.isDirectory() && !tlsDir.mkdirs()) {
      throw new IOException("cannot create " + tlsDir);
    }
    String keytool = new File(System.getProperty("java.home"), "bin/keytool").getPath();
    // Three short JVMs: the quick compiler and the serial collector start them sooner.
    String[] quick = {"-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC"};
    String server = new File(tlsDir, "server.jks").getPath();
    String trust = new File(tlsDir, "truststore.jks").getPath();
    String pem = new File(tlsDir, "ca.pem").getPath();
    run(keytool, quick[0], quick[1], "-genkeypair", "-alias", "localhost", "-keyalg", "RSA",
        "-keysize", "2048", "-validity", "30", "-dname", "CN=localhost",
        "-ext", "SAN=dns:localhost,ip:127.0.0.1", "-keystore", server, "-storetype", "JKS",
        "-storepass", TLS_PASSWORD, "-keypass", TLS_PASSWORD);
    run(keytool, quick[0], quick[1], "-exportcert", "-rfc", "-alias", "localhost",
        "-keystore", server, "-storepass", TLS_PASSWORD, "-file", pem);
    run(keytool, quick[0], quick[1], "-importcert", "-noprompt", "-alias", "localhost",
        "-file", pem, "-keystore", trust, "-storetype", "JKS", "-storepass", TLS_PASSWORD);
    Configuration sslServer = new Configuration(false);
    sslServer.set("ssl.server.keystore.location", server);
    sslServer.set("ssl.server.keystore.password", TLS_PASSWORD);
    sslServer.set("ssl.server.keystore.keypassword", TLS_PASSWORD);
    sslServer.set("ssl.server.keystore.type", "jks");
    sslServer.set("ssl.server.truststore.location", trust);
    sslServer.set("ssl.server.truststore.password", TLS_PASSWORD);
    sslServer.set("ssl.server.truststore.type", "jks");
    writeXml(sslServer, new File(tlsDir, "ssl-server.xml"));
    Configuration sslClient = new Configuration(false);
    sslClient.set("ssl.client.truststore.location", trust);
    sslClient.set("ssl.client.truststore.password", TLS_PASSWORD);
    sslClient.set("ssl.client.truststore.type", "jks");
    writeXml(sslClient, new File(tlsDir, "ssl-client.xml"));
    Thread.currentThread().setContextClassLoader(new URLClassLoader(
        new URL[] {tlsDir.toURI().toURL()}, Thread.currentThread().getContextClassLoader()));
  }

  private static void run(String... argv) throws IOException, InterruptedException {
    Process process = new ProcessBuilder(argv).redirectErrorStream(true).start();
    String output = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (process.waitFor() != 0) {
      throw new IOException(String.join(" ", argv) + " failed: " + output);
    }
  }

  private static void writeXml(Configuration conf, File file) throws IOException {
    try (OutputStream out = new FileOutputStream(file)) {
      conf.writeXml(out);
    }
  }

  /** The CA file (PEM) a client trusts the namenode's and datanode's HTTPS with. */
  String caPem() {
    return new File(tlsDir, "ca.pem").getPath();
  }

  /** The HDFS superuser: the namenode's principal's short name. */
  String superuser() {
    return "hdfs";
  }

  /** The secure HDFS's settings, on the cluster's configuration. */
  void configureCluster(Configuration conf, String superuserGroup) {
    String hdfs = principals.get("hdfs")[0];
    String keytab = principals.get("hdfs")[1];
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("dfs.namenode.kerberos.principal", hdfs);
    conf.set("dfs.namenode.keytab.file", keytab);
    conf.set("dfs.datanode.kerberos.principal", hdfs);
    conf.set("dfs.datanode.keytab.file", keytab);
    conf.set("dfs.web.authentication.kerberos.principal", principals.get("HTTP")[0]);
    conf.set("dfs.web.authentication.kerberos.keytab", principals.get("HTTP")[1]);
    conf.setBoolean("dfs.block.access.token.enable", true);
    conf.set("dfs.data.transfer.protection", "authentication");
    // A secure datanode on unprivileged ports: SASL on its transfers (above) and HTTPS only.
    conf.set("dfs.http.policy", "HTTPS_ONLY");
    conf.set("dfs.namenode.https-address", "127.0.0.1:0");
    conf.set("dfs.datanode.https.address", "127.0.0.1:0");
    conf.set("dfs.https.server.keystore.resource", "ssl-server.xml");
    conf.set("dfs.client.https.keystore.resource", "ssl-client.xml");
    // WebHDFS: SPNEGO on the namenode's HTTP server, which Hadoop 3.5 takes from the global
    // HTTP authentication filter (its WebHDFS has no filter of its own); doas for the hub.
    conf.set("dfs.namenode.kerberos.internal.spnego.principal", principals.get("HTTP")[0]);
    conf.set("hadoop.http.filter.initializers", "org.apache.hadoop.security.authentication"
        + ".server.ProxyUserAuthenticationFilterInitializer");
    conf.set("hadoop.http.authentication.type", "kerberos");
    conf.set("hadoop.http.authentication.simple.anonymous.allowed", "false");
    conf.set("hadoop.http.authentication.kerberos.principal", principals.get("HTTP")[0]);
    conf.set("hadoop.http.authentication.kerberos.keytab", principals.get("HTTP")[1]);
    // The hub is an HDFS superuser (it lays out the course) and may act for any student.
    conf.set("hadoop.user.group.static.mapping.overrides", "dr.who=;" + hub + "=" + superuserGroup);
    Groups.getUserToGroupsMappingServiceWithLoadedConfiguration(conf); // the JVM's one mapping
    conf.set("hadoop.proxyuser." + hub + ".hosts", "*");
    conf.set("hadoop.proxyuser." + hub + ".groups", "*");
  }

  /** What a client needs in core-site.xml and hdfs-site.xml to reach the secure HDFS. */
  void configureClient(Configuration core, Configuration hdfs) {
    core.set("hadoop.security.authentication", "kerberos");
    core.set("hadoop.proxyuser." + hub + ".hosts", "*");
    core.set("hadoop.proxyuser." + hub + ".groups", "*");
    hdfs.set("dfs.namenode.kerberos.principal", principals.get("hdfs")[0]);
    hdfs.set("dfs.datanode.kerberos.principal", principals.get("hdfs")[0]);
    hdfs.set("dfs.web.authentication.kerberos.principal", principals.get("HTTP")[0]);
    hdfs.set("dfs.block.access.token.enable", "true");
    hdfs.set("dfs.data.transfer.protection", "authentication");
    hdfs.set("dfs.http.policy", "HTTPS_ONLY");
    // The namenode's web address (WebHDFS) is its HTTPS one: swebhdfs for Hadoop's clients.
    for (Map.Entry<String, String> e : hdfs.getPropsWithPrefix("dfs.namenode.http-address")
        .entrySet()) {
      hdfs.set("dfs.namenode.https-address" + e.getKey(), e.getValue());
      hdfs.unset("dfs.namenode.http-address" + e.getKey());
    }
  }

  /** The ready line's {@code "kerberos"} object. */
  String readyJson() {
    List<String> entries = new ArrayList<>();
    for (Map.Entry<String, String[]> e : principals.entrySet()) {
      entries.add(
          quote(e.getKey()) + ": {\"principal\": "
              + quote(e.getValue()[0]) + ", \"keytab\": "
              + quote(e.getValue()[1]) + "}");
    }
    return "{\"realm\": " + quote(kdc.getRealm())
        + ", \"kdc_port\": " + kdc.getPort()
        + ", \"krb5_conf\": " + quote(krb5Conf.getPath())
        + ", \"ca_pem\": " + quote(caPem())
        + ", \"hub\": " + quote(hub)
        + ", \"students\": [" + String.join(", ", students.stream().map(SecureSetup::quote)
            .toList()) + "]"
        + ", \"principals\": {" + String.join(", ", entries) + "}}";
  }

  void stop() {
    kdc.stop();
  }

  /** {@code text} as a JSON string. */
  static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }
}
