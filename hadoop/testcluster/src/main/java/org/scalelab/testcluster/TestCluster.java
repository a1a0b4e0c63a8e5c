package org.scalelab.testcluster;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;
import org.apache.hadoop.security.UserGroupInformation;

/**
 * ScaleLab's test cluster: HDFS (a namenode, or an HA pair, and a datanode) on 127.0.0.1, in
 * this JVM.
 *
 * <pre>
 * java -Xmx512m -cp scalelab-testcluster.jar:lib/* org.scalelab.testcluster.TestCluster \
 *     --base-dir DIR --conf-dir DIR [--superuser-group NAME] [--ha NAMESERVICE] \
 *     [--kerberos [--students NAME,...] [--hub-principal NAME]]
 * </pre>
 *
 * <p>Simple authentication, permissions on ({@code dfs.permissions.enabled}), WebHDFS on, every
 * port chosen free by the system. The user who runs the JVM is the HDFS superuser (it owns the
 * namenode), and may impersonate any user ({@code hadoop.proxyuser.<user>.*}: WebHDFS's
 * {@code doas}, hdfs-native's {@code HADOOP_PROXY_USER}); members of {@code --superuser-group}
 * (default {@code supergroup}) are superusers too. Any other user name a client sends
 * ({@code HADOOP_USER_NAME}, WebHDFS's {@code user.name}) is that user, as on a real cluster with
 * simple authentication. With {@code --ha NAMESERVICE}: two namenodes, {@code nn1} (active) and
 * {@code nn2} (standby), sharing their edits, behind the nameservice. With {@code --kerberos}:
 * a KDC in this JVM and a secure HDFS, see {@link SecureSetup} ({@code krb5.conf} and the
 * keytabs are written into {@code --conf-dir} too).
 *
 * <p>Once the cluster is up, the client configuration ({@code core-site.xml}: {@code
 * fs.defaultFS} is {@code hdfs://127.0.0.1:<rpc port>}, or {@code hdfs://NAMESERVICE};
 * {@code hdfs-site.xml}) is written into {@code --conf-dir}, for {@code HADOOP_CONF_DIR}, and ONE
 * line of JSON goes to stdout ({@code nameservice} null without {@code --ha}; the ports at the
 * top are the active namenode's):
 *
 * <pre>
 * {"ready": true, "fs_default_fs": "hdfs://127.0.0.1:41234", "namenode_rpc_port": 41234,
 *  "webhdfs_port": 41235, "conf_dir": "<the --conf-dir, absolute>", "superuser": "root",
 *  "nameservice": null, "namenodes": [{"id": "nn1", "rpc_port": 41234, "http_port": 41235}],
 *  "kerberos": null}
 * </pre>
 *
 * <p>({@code "kerberos"} with {@code --kerberos}: {@code {"realm": "SCALELAB.TEST", "kdc_port":
 * ..., "krb5_conf": "...", "hub": "scalelab", "students": [...], "principals": {"alice":
 * {"principal": "alice@SCALELAB.TEST", "keytab": "..."}, ...}}}.)
 *
 * <p>Nothing else is written to stdout (Hadoop's own output goes to stderr), but the answers to
 * commands: a line {@code failover} on stdin makes the active namenode of an HA pair standby and
 * the other active, answered by {@code {"active": "nn2"}} (or {@code {"error": "..."}}). The
 * cluster stops, and its data under {@code --base-dir} is deleted, when stdin closes (or on
 * SIGTERM); exit status 0 then, 1 if the cluster failed to start (the stack trace on stderr), 2
 * for bad arguments.
 */
public final class TestCluster {

  private static final String USAGE =
      "usage: TestCluster --base-dir DIR --conf-dir DIR [--superuser-group NAME]"
          + " [--ha NAMESERVICE] [--kerberos [--students NAME,...] [--hub-principal NAME]]";
  private static final List<String> OPTIONS =
      List.of("--base-dir", "--conf-dir", "--superuser-group", "--ha");

  private TestCluster() {}

  public static void main(String[] args) throws Exception {
    // stdout carries the ready line and answers only: Hadoop's own output goes to stderr.
    PrintStream out = System.out;
    System.setOut(System.err);

    Map<String, String> secureOptions = new LinkedHashMap<>();
    String[] rest = SecureSetup.takeOptions(args, secureOptions);
    Map<String, String> options = rest == null ? null : parseArguments(rest);
    if (options == null) {
      System.err.println(USAGE);
      System.exit(2);
    }
    File baseDir = new File(options.get("--base-dir")).getAbsoluteFile();
    File confDir = new File(options.get("--conf-dir")).getAbsoluteFile();
    String superuserGroup = options.getOrDefault("--superuser-group", "supergroup");
    String nameservice = options.get("--ha");
    SecureSetup secure; // with --kerberos: the KDC, started before anything asks for a user
    MiniDFSCluster cluster;
    String superuser;
    try {
      secure = SecureSetup.startIfAsked(secureOptions, baseDir, confDir);
      superuser = secure != null
          ? secure.superuser() : UserGroupInformation.getCurrentUser().getShortUserName();
      cluster = start(baseDir, superuser, superuserGroup, nameservice, secure);
    } catch (Exception e) {
      System.err.println("the test cluster failed to start:");
      e.printStackTrace();
      System.exit(1);
      return;
    }
    Runtime.getRuntime().addShutdownHook(
        new Thread(() -> stop(cluster, secure), "testcluster-stop"));

    List<String> ids = nameservice == null ? List.of("nn1") : List.of("nn1", "nn2");
    List<String> namenodes = new ArrayList<>();
    for (int i = 0; i < ids.size(); i++) {
      namenodes.add(
          "{\"id\": " + quote(ids.get(i)) + ", \"rpc_port\": " + cluster.getNameNodePort(i)
              + ", \"http_port\": " + httpPort(cluster, i) + "}");
    }
    String defaultFs =
        nameservice == null
            ? "hdfs://127.0.0.1:" + cluster.getNameNodePort(0)
            : "hdfs://" + nameservice;
    writeClientConf(
        cluster, confDir, defaultFs, nameservice, ids, superuser, superuserGroup, secure);

    out.println(
        "{\"ready\": true, \"fs_default_fs\": " + quote(defaultFs)
            + ", \"namenode_rpc_port\": " + cluster.getNameNodePort(0)
            + ", \"webhdfs_port\": " + httpPort(cluster, 0)
            + ", \"conf_dir\": " + quote(confDir.getPath())
            + ", \"superuser\": " + quote(superuser)
            + ", \"nameservice\": " + (nameservice == null ? "null" : quote(nameservice))
            + ", \"namenodes\": [" + String.join(", ", namenodes) + "]"
            + ", \"kerberos\": " + (secure == null ? "null" : secure.readyJson()) + "}");
    out.flush();

    serveCommands(cluster, ids, out);
    stop(cluster, secure);
    System.exit(0);
  }

  /** {@code --name value} pairs, or null when one is unknown, lacks its value, or a required
   * one is missing. */
  static Map<String, String> parseArguments(String[] args) {
    Map<String, String> options = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i += 2) {
      if (!OPTIONS.contains(args[i]) || i + 1 >= args.length) {
        return null;
      }
      options.put(args[i], args[i + 1]);
    }
    if (!options.containsKey("--base-dir") || !options.containsKey("--conf-dir")) {
      return null;
    }
    return options;
  }

  private static MiniDFSCluster start(
      File baseDir, String superuser, String superuserGroup, String nameservice,
      SecureSetup secure) throws IOException {
    Configuration conf = new HdfsConfiguration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, baseDir.getPath());
    conf.setBoolean("dfs.permissions.enabled", true);
    conf.set("dfs.permissions.superusergroup", superuserGroup);
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setInt("dfs.replication", 1);
    conf.set("hadoop.proxyuser." + superuser + ".hosts", "*");
    conf.set("hadoop.proxyuser." + superuser + ".groups", "*");
    // Few threads: one JVM on a small machine (Hadoop's defaults are sized for a server).
    conf.setInt("dfs.namenode.handler.count", 4);
    conf.setInt("dfs.namenode.service.handler.count", 2);
    conf.setInt("dfs.datanode.handler.count", 2);
    if (secure != null) {
      secure.configureCluster(conf, superuserGroup);
    }
    MiniDFSCluster.Builder builder =
        new MiniDFSCluster.Builder(conf, baseDir).numDataNodes(1).format(true);
    if (nameservice == null) {
      builder.nameNodePort(0).nameNodeHttpPort(0);
    } else {
      builder.nnTopology(
          new MiniDFSNNTopology()
              .addNameservice(
                  new MiniDFSNNTopology.NSConf(nameservice)
                      .addNN(new MiniDFSNNTopology.NNConf("nn1"))
                      .addNN(new MiniDFSNNTopology.NNConf("nn2"))));
    }
    MiniDFSCluster cluster = builder.build();
    if (nameservice != null) {
      cluster.transitionToActive(0); // both start as standby
    }
    cluster.waitActive();
    return cluster;
  }

  private static void writeClientConf(
      MiniDFSCluster cluster, File confDir, String defaultFs, String nameservice,
      List<String> ids, String superuser, String superuserGroup, SecureSetup secure)
      throws IOException {
    if (!confDir.isDirectory() && !confDir.mkdirs()) {
      throw new IOException("cannot create the configuration folder " + confDir);
    }
    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", defaultFs);
    core.set("hadoop.security.authentication", "simple");
    core.set("hadoop.proxyuser." + superuser + ".hosts", "*");
    core.set("hadoop.proxyuser." + superuser + ".groups", "*");

    Configuration hdfs = new Configuration(false);
    if (nameservice == null) {
      hdfs.set("dfs.namenode.rpc-address", "127.0.0.1:" + cluster.getNameNodePort(0));
      hdfs.set("dfs.namenode.http-address", "127.0.0.1:" + httpPort(cluster, 0));
    } else {
      hdfs.set("dfs.nameservices", nameservice);
      hdfs.set("dfs.ha.namenodes." + nameservice, String.join(",", ids));
      for (int i = 0; i < ids.size(); i++) {
        String key = nameservice + "." + ids.get(i);
        hdfs.set("dfs.namenode.rpc-address." + key, "127.0.0.1:" + cluster.getNameNodePort(i));
        hdfs.set("dfs.namenode.http-address." + key, "127.0.0.1:" + httpPort(cluster, i));
      }
      hdfs.set(
          "dfs.client.failover.proxy.provider." + nameservice,
          "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
    }
    hdfs.set("dfs.webhdfs.enabled", "true");
    hdfs.set("dfs.permissions.enabled", "true");
    hdfs.set("dfs.permissions.superusergroup", superuserGroup);
    hdfs.set("dfs.replication", "1");
    if (secure != null) {
      secure.configureClient(core, hdfs);
    }
    write(core, new File(confDir, "core-site.xml"));
    write(hdfs, new File(confDir, "hdfs-site.xml"));
  }

  /** The namenode's HTTP port, or its HTTPS port where it has only that (--kerberos). */
  private static int httpPort(MiniDFSCluster cluster, int index) {
    InetSocketAddress http = cluster.getNameNode(index).getHttpAddress();
    return (http != null ? http : cluster.getNameNode(index).getHttpsAddress()).getPort();
  }

  private static void write(Configuration conf, File file) throws IOException {
    File part = new File(file.getPath() + ".part");
    try (OutputStream out = new FileOutputStream(part)) {
      conf.writeXml(out);
    }
    if (!part.renameTo(file)) {
      throw new IOException("cannot write " + file);
    }
  }

  /** Answer commands on stdin, one a line, until it closes. */
  private static void serveCommands(MiniDFSCluster cluster, List<String> ids, PrintStream out)
      throws IOException {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    int active = 0;
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      String command = line.trim();
      if (command.isEmpty()) {
        continue;
      }
      if (!command.equals("failover")) {
        out.println("{\"error\": " + quote("unknown command " + command + "; known: failover")
            + "}");
      } else if (ids.size() < 2) {
        out.println("{\"error\": \"failover needs an HA pair (--ha NAMESERVICE)\"}");
      } else {
        int next = (active + 1) % ids.size();
        try {
          cluster.transitionToStandby(active);
          cluster.transitionToActive(next);
          active = next;
          out.println("{\"active\": " + quote(ids.get(active)) + "}");
        } catch (IOException | RuntimeException e) {
          e.printStackTrace();
          out.println("{\"error\": " + quote("failover failed: " + e) + "}");
        }
      }
      out.flush();
    }
  }

  private static synchronized void stop(MiniDFSCluster cluster, SecureSetup secure) {
    if (cluster.isClusterUp()) {
      cluster.shutdown(true);
    }
    if (secure != null) {
      secure.stop();
    }
  }

  private static String quote(String text) {
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
